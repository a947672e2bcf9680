"""The rules of ptxsem.py: each takes the Model and one IR instruction and returns host IR
computing what the hardware computes for it (the instruction's own result is used where the
host already agrees)."""

from __future__ import annotations

import re

from llvmlite import ir

from ....errors import UnsupportedError

_MOV = re.compile(r"^mov\.b(32|64) \$0, \$1;$")
# The hardware's canonical NaNs, by float width.
_CANONICAL = {16: 0x7FFF, 32: 0x7FFFFFFF, 64: 0x7FFFFFFFFFFFFFFF}
_FLOAT_BITS = {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}


class Model:
    """An IRBuilder wrapper that records the instructions it makes (ptxsem skips them when
    it redirects uses)."""

    def __init__(self, builder: ir.IRBuilder, ftz: bool):
        self.b = builder
        self.ftz = ftz  # the kernel's f32 instructions are `.ftz`
        self.parts: set[int] = set()

    def __getattr__(self, name):
        method = getattr(self.b, name)

        def call(*args, **kwargs):
            value = method(*args, **kwargs)
            self.parts.add(id(value))
            return value
        return call

    def ity(self, ty: ir.Type) -> ir.IntType:
        return ir.IntType(_FLOAT_BITS[type(ty)])

    def bits(self, x: ir.Value) -> ir.Value:
        return self.bitcast(x, self.ity(x.type))

    def is_nan(self, x: ir.Value) -> ir.Value:
        """NaN test on the bits (the host's DAZ must not matter)."""
        width = _FLOAT_BITS[type(x.type)]
        man = {16: 10, 32: 23, 64: 52}[width]
        mag = self.and_(self.bits(x), ir.Constant(self.ity(x.type), (1 << (width - 1)) - 1))
        inf = ((1 << (width - 1 - man)) - 1) << man
        return self.icmp_unsigned(">", mag, ir.Constant(self.ity(x.type), inf))

    def canonical(self, ty: ir.Type) -> ir.Value:
        return ir.Constant(self.ity(ty), _CANONICAL[_FLOAT_BITS[type(ty)]]).bitcast(ty)

    def canonicalize(self, x: ir.Value) -> ir.Value:
        return self.select(self.is_nan(x), self.canonical(x.type), x)


def canonical_nan(m: Model, instr) -> ir.Value:
    """Arithmetic, rounding and conversions: a NaN result is the canonical NaN."""
    if type(instr.type) not in _FLOAT_BITS:
        return instr  # e.g. a vector: not emitted for CUDA
    return m.canonicalize(instr)


def inline_asm(m: Model, instr) -> ir.Value:
    """The only inline PTX the emitters use: `mov.bN $0, $1;` (a bitcast)."""
    match = _MOV.match(instr.callee.asm)
    if match is None:
        raise UnsupportedError(f"the CUDA emulator does not model inline PTX "
                               f"'{instr.callee.asm}'")
    return m.bitcast(instr.args[0], instr.type)


def sign_op(m: Model, instr) -> ir.Value:
    """fneg/fabs → neg/abs(.ftz): canonical NaN; with .ftz a subnormal input gives a zero
    (neg: of the flipped sign, abs: +0)."""
    x = instr.operands[0] if instr.opname == "fneg" else instr.args[0]
    result = m.canonicalize(instr)
    if not (m.ftz and isinstance(x.type, ir.FloatType)):
        return result
    mag = m.and_(m.bits(x), ir.Constant(ir.IntType(32), 0x7FFFFFFF))
    tiny = m.icmp_unsigned("<", mag, ir.Constant(ir.IntType(32), 0x00800000))
    zero_bits = m.and_(m.bits(instr), ir.Constant(ir.IntType(32), 0x80000000))
    return m.select(tiny, m.bitcast(zero_bits, x.type), result)


def min_max(m: Model, instr) -> ir.Value:
    """min/max.f32 (minnum/maxnum) and min/max.NaN.f32 (minimum/maximum), -0 < +0."""
    a, b = instr.args
    name = instr.callee.name.split(".")[1]
    lower = name.startswith("min")
    less = m.fcmp_ordered("<", a, b)
    greater = m.fcmp_ordered(">", a, b)
    # Equal values: only ±0 differ in bits; min prefers the negative one, max the positive.
    tie_bits = (m.or_ if lower else m.and_)(m.bits(a), m.bits(b))
    picked = m.select(less if lower else greater, a,
                      m.select(greater if lower else less, b, m.bitcast(tie_bits, a.type)))
    nan_a, nan_b = m.is_nan(a), m.is_nan(b)
    canonical = m.canonical(a.type)
    if name in ("minimum", "maximum"):
        return m.select(m.or_(nan_a, nan_b), canonical, picked)
    one_nan = m.select(nan_a, m.select(nan_b, canonical, b), a)
    return m.select(m.or_(nan_a, nan_b), one_nan, picked)


def frem(m: Model, instr) -> ir.Value:
    """NVPTX's expansion: |y| == inf ? x : fma(-trunc(x / y), y, x), each step's NaN
    canonical."""
    x, y = instr.operands
    sfx = "f64" if isinstance(x.type, ir.DoubleType) else "f32"
    module = instr.parent.parent.module
    q = m.canonicalize(m.fdiv(x, y))
    t = m.canonicalize(m.call(_intrinsic(module, f"llvm.trunc.{sfx}", x.type, 1), [q]))
    r = m.canonicalize(m.call(_intrinsic(module, f"llvm.fma.{sfx}", x.type, 3), [m.fneg(t), y, x]))
    ay = m.call(_intrinsic(module, f"llvm.fabs.{sfx}", x.type, 1), [y])
    inf = m.fcmp_ordered("==", ay, ir.Constant(x.type, float("inf")))
    return m.select(inf, x, r)


def _intrinsic(module: ir.Module, name: str, ty: ir.Type, n: int) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ty, [ty] * n), name)
    return fn


def float_to_int(m: Model, instr) -> ir.Value:
    """cvt.rzi.{s,u}N.fM: NaN → 0, out-of-range values saturate (widths 32 and 64; narrower
    results are left to the host)."""
    x = instr.operands[0]
    width = instr.type.width
    if width not in (32, 64) or type(x.type) not in _FLOAT_BITS:
        return instr
    signed = instr.opname == "fptosi"
    lo, hi = (-(2.0 ** (width - 1)), 2.0 ** (width - 1)) if signed else (0.0, 2.0 ** width)
    top = (1 << (width - 1)) - 1 if signed else (1 << width) - 1
    bottom = (1 << (width - 1)) if signed else 0
    below = m.fcmp_unordered("<", x, ir.Constant(x.type, lo))  # NaN too, fixed below
    above = m.fcmp_ordered(">=", x, ir.Constant(x.type, hi))
    safe = m.select(m.or_(below, above), ir.Constant(x.type, 0.0), x)
    conv = m.fptosi(safe, instr.type) if signed else m.fptoui(safe, instr.type)
    r = m.select(above, ir.Constant(instr.type, top),
                 m.select(below, ir.Constant(instr.type, bottom), conv))
    return m.select(m.is_nan(x), ir.Constant(instr.type, 0), r)


def int_div(m: Model, instr) -> ir.Value:
    """div/rem: by zero all ones; INT_MIN / -1 = INT_MIN and INT_MIN % -1 = 0, which the
    host computes itself once the instruction divides by 1 there (x86 would trap)."""
    x, y = instr.operands
    ty = y.type
    m.b.position_before(instr)
    zero = m.icmp_unsigned("==", y, ir.Constant(ty, 0))
    bad = zero
    if instr.opname in ("sdiv", "srem"):
        overflow = m.and_(m.icmp_unsigned("==", x, ir.Constant(ty, 1 << (ty.width - 1))),
                          m.icmp_unsigned("==", y, ir.Constant(ty, (1 << ty.width) - 1)))
        bad = m.or_(zero, overflow)
    instr.operands = [x, m.select(bad, ir.Constant(ty, 1), y)]
    instr._clear_string_cache()
    m.b.position_after(instr)
    return m.select(zero, ir.Constant(ty, (1 << ty.width) - 1), instr)
