"""Scalar building blocks shared by the lowerings: typed constants, rounding, max/min, etc.

Every function takes the EmitContext and LLVM values in register form (see types.py) and
returns register-form values. Narrow-float results must pass through `finish`.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode, PrimitiveType
from . import lowfloat, nanbits
from .compose import operand_index
from .types import F64, I32, ElemType, elem_type


def const(et: ElemType, value) -> ir.Constant:
    """A constant of the register type of `et` (complex: a Python complex or number)."""
    if et.is_complex:
        z = complex(value)
        part = et.part.value_type
        return ir.Constant(et.value_type, [ir.Constant(part, z.real), ir.Constant(part, z.imag)])
    if et.is_float:
        return ir.Constant(et.value_type, float(value))
    if et.kind == "pred":
        return ir.Constant(et.value_type, 1 if value else 0)
    return ir.Constant(et.value_type, int(value) & ((1 << et.bits) - 1))


def all_ones(et: ElemType) -> ir.Constant:
    return ir.Constant(et.value_type, (1 << et.bits) - 1)


def int_min(et: ElemType) -> ir.Constant:
    return ir.Constant(et.value_type, 1 << (et.bits - 1))


def finish(ctx, et: ElemType, value: ir.Value) -> ir.Value:
    """Round an f32 result to the narrow float type `et` (identity for other types)."""
    if et.ptype == PrimitiveType.BF16:
        return lowfloat.round_to_bf16_quiet(ctx, value)
    if et.is_narrow_float:
        return lowfloat.round_to(ctx, et, value)
    return value


def float_suffix(value: ir.Value) -> str:
    return "f64" if value.type == F64 else "f32"


def contractible(ctx, instr: ir.Instruction) -> ir.Instruction:
    """`instr` (an fadd, fsub or fmul), which LLVM may fuse with its neighbour into one FMA
    on CPU targets, as XLA CPU lets it everywhere (its TargetOptions set
    AllowFPOpFusion=Fast): where the target has FMA, `a*b + c` rounds once, and so only
    where the product has no other use, both sit in one basic block, and the types are
    ones the target fuses (LLVM's DAG combiner decides, as it does for XLA)."""
    if ctx.target_kind == "cpu":
        instr.flags.append("contract")
    return instr


def fmax(ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    """IEEE maximum: NaN-propagating, +0 > -0, any NaN comes out as the canonical one.

    For reductions: LLVM vectorizes llvm.maximum recurrences, and which NaN a reduction
    returns depends on its order anyway. Elementwise ops use xla_max (exact NaN bits).
    """
    return ctx.call(f"llvm.maximum.{float_suffix(a)}", [a, b])


def fmin(ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    """IEEE minimum (see fmax)."""
    return ctx.call(f"llvm.minimum.{float_suffix(a)}", [a, b])


def xla_max(ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    """XLA CPU's elementwise float maximum, bit for bit (the interpreter's float_max).

    NaN-propagating with -0 < +0. A NaN `a` comes back as it is; otherwise `b` comes back
    with its sign bit ANDed with `a`'s, which is also the right answer whenever `b` wins
    (a NaN b, equal zeros, or b > a, where b negative implies a negative). Denormal
    operands read as zero (the result is flushed, which equals flushing the operands).
    """
    return _min_max(ctx, a, b, ">")


def xla_min(ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    """XLA CPU's elementwise float minimum, bit for bit: xla_max with the sign bits ORed."""
    return _min_max(ctx, a, b, "<")


def xla_clamp(ctx, lo: ir.Value, x: ir.Value, hi: ir.Value) -> ir.Value:
    """XLA's float clamp: min(max(lo, x), hi) in this operand order (it picks the NaN)."""
    return xla_min(ctx, xla_max(ctx, lo, x), hi)


def _min_max(ctx, a: ir.Value, b: ir.Value, direction: str) -> ir.Value:
    bld = ctx.builder
    ity = int_bits_of_float(a)
    sign = ir.Constant(ity, 1 << (ity.width - 1))
    # Through nanbits: on CUDA a visible bitcast lets LLVM turn the masks into fabs, whose
    # PTX (abs.ftz) would flush subnormals and canonicalize the NaN picked here.
    a_bits, b_bits = nanbits.float_bits(ctx, a), nanbits.float_bits(ctx, b)
    if direction == ">":
        b_wins = bld.and_(b_bits, bld.or_(a_bits, ir.Constant(ity, (1 << (ity.width - 1)) - 1)))
    else:
        b_wins = bld.or_(b_bits, bld.and_(a_bits, sign))
    keep_a = bld.or_(bld.fcmp_ordered(direction, a, b), is_nan(ctx, a))
    picked = bld.select(keep_a, a, bld.bitcast(b_wins, a.type))
    if nanbits.exact_nans(ctx):
        # ptxas turns `x > c ? x : c`-shaped selects (a constant bound folds the masks away)
        # into FMNMX, which returns the number when the other operand is NaN: a NaN `b`
        # is picked explicitly, not through the comparison.
        b_nan = bld.and_(is_nan(ctx, b), bld.not_(is_nan(ctx, a)))  # a NaN `a` still wins
        picked = bld.select(b_nan, bld.bitcast(b_wins, a.type), picked)
    return flush_denormal(ctx, picked)


def flush_denormal(ctx, x: ir.Value) -> ir.Value:
    """A denormal becomes a zero of its sign (the compare sees zero with or without DAZ)."""
    tiny = 2.2250738585072014e-308 if x.type == F64 else 1.1754943508222875e-38
    bld = ctx.builder
    small = bld.fcmp_ordered("<", unary_float(ctx, "fabs", x), ir.Constant(x.type, tiny))
    zero = ctx.call(f"llvm.copysign.{float_suffix(x)}", [ir.Constant(x.type, 0.0), x])
    return bld.select(small, zero, x)


def unary_float(ctx, name: str, x: ir.Value) -> ir.Value:
    """A unary LLVM float intrinsic (fabs, floor, ceil, roundeven, round, sqrt, ...)."""
    return ctx.call(f"llvm.{name}.{float_suffix(x)}", [x])


def exact_unary(ctx, name: str, x: ir.Value) -> ir.Value:
    """unary_float with x86's NaN result (a NaN x comes back quiet, not canonical)."""
    return nanbits.x86_nan(ctx, unary_float(ctx, name, x), x)


def is_nan(ctx, x: ir.Value) -> ir.Value:
    return ctx.builder.fcmp_unordered("uno", x, x)


def out_type(instr: Instruction) -> ElemType:
    """The result's element type (complex included: real-only rules reject it by kind)."""
    return elem_type(instr.shape.element_type, complex_ok=True)


def operand_type(instr: Instruction, i: int = 0) -> ElemType:
    return elem_type(instr.operands[i].shape.element_type, complex_ok=True)


def int_bits_of_float(value: ir.Value) -> ir.IntType:
    return ir.IntType(64 if value.type == F64 else 32)


# Per-kind implementations of one elementwise opcode: fn(ctx, instr, values) -> value.
KindFn = Callable[..., ir.Value]

# The float rules of these opcodes come from here whatever rules the lowering passes in:
# XLA's NaN bits need xla_max/xla_min, not the reduction-friendly fmax/fmin that arith.py
# builds its rules from. (Once arith.py uses xla_* itself, this table can go.)
XLA_FLOAT_RULES: dict[Opcode, KindFn] = {
    Opcode.MAXIMUM: lambda ctx, instr, v, et: xla_max(ctx, *v),
    Opcode.MINIMUM: lambda ctx, instr, v, et: xla_min(ctx, *v),
    Opcode.CLAMP: lambda ctx, instr, v, et: xla_clamp(ctx, *v),
}
# XLA CPU's f16 maximum/minimum/clamp return the positive quiet NaN 0x7e00 whatever NaN went
# in; f32/f64 keep the payload xla_max picks, bf16 results lose it in `finish`.
F16_CANONICAL_NAN = frozenset(XLA_FLOAT_RULES)
_F16_QUIET_NAN_IN_F32 = 0x7FC00000  # the f32 register form of f16 0x7e00


def elementwise(rules: dict[str, KindFn], *, operand: int = 0):
    """A lowering that dispatches on the element kind of operand `operand`.

    `rules` maps "float" / "int" / "uint" / "pred" ("integral" covers int and uint) to
    fn(ctx, instr, values, et) computing one element; float results are finished (rounded to
    narrow types) here.
    """

    def lowering(ctx, instr: Instruction, gens):
        et = operand_type(instr, operand)
        fn = rules.get(et.kind) or (rules.get("integral") if et.is_integral else None)
        if et.is_float and instr.opcode in XLA_FLOAT_RULES:
            fn = XLA_FLOAT_RULES[instr.opcode]
        if fn is None:
            raise UnsupportedError(f"{instr.opcode.value} is not supported for "
                                   f"{PrimitiveType(et.ptype).name.lower()} operands "
                                   f"(instruction %{instr.name})")
        result_et = out_type(instr)
        canonical = result_et.ptype == PrimitiveType.F16 and instr.opcode in F16_CANONICAL_NAN

        def generate(index):
            values = [g(operand_index(instr, i, index)) for i, g in enumerate(gens)]
            value = fn(ctx, instr, values, et)
            if canonical:
                nan = ir.Constant(I32, _F16_QUIET_NAN_IN_F32).bitcast(value.type)
                value = ctx.builder.select(is_nan(ctx, value), nan, value)
            return finish(ctx, result_et, value)

        return generate

    return lowering

