"""Small discrete Fourier transforms as direct sums: the target-neutral math of fft kernels.

XLA's fft transforms the innermost len(fft_length) dimensions (1 to 3) of its operand;
every leading dimension is a batch dimension. A transform is a sequence of 1-D passes, one
per transformed axis (`DftPlan.passes`, in the order they apply to the operand):
- FFT / IFFT: complex passes, e^(-2 pi i kx/n) / e^(+2 pi i kx/n), IFFT scaled by 1/N;
- RFFT: the last axis first, real input, its n//2 + 1 non-negative frequencies (r2c), then
  complex forward passes over the other axes;
- IRFFT: complex inverse passes over the leading axes, then the last axis c2r: n real
  outputs from n//2 + 1 Hermitian inputs, where only the real parts of the DC and (even n)
  Nyquist terms count (numpy's irfftn, which XLA matches); scaled by 1/N.

Each pass output is one sum over the pass's inputs (`line_sum`), with twiddles read from a
constant table of cos/sin(2 pi j/n) per length at j = k*x mod n (stepped, no sin/cos at run
time). Sums run in f64 whatever the element type, so c64 results are about as accurate as a
real FFT's. CPU kernels apply the passes one after another through scratch rows
(cpu/fft.py); `direct_element` nests them into a single sum per output element (cuda/fft.py:
one thread per element).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, PrimitiveType
from ...util.record import dataclass
from .complex import ir as complex_ir
from .fmath import FMath
from .types import F32, F64, I1, I64, elem_type

FFT, IFFT, RFFT, IRFFT = 0, 1, 2, 3
_NAMES = {FFT: "FFT", IFFT: "IFFT", RFFT: "RFFT", IRFFT: "IRFFT"}

Parts = tuple[ir.Value, ir.Value | None]  # (re, im) in f64; im None for real values
Load = Callable[[ir.Value], Parts]


@dataclass(frozen=True)
class AxisPass:
    """A 1-D transform along transformed axis `axis` (0 = the outermost transformed one)."""

    axis: int
    n: int  # transform length (the twiddles' period)
    n_in: int  # elements read along the axis
    n_out: int  # elements written along the axis
    kind: str  # "complex" | "r2c" | "c2r"
    sign: int  # -1: forward, +1: inverse


@dataclass(frozen=True)
class DftPlan:
    """The passes of one fft instruction and the shapes they work on."""

    fft_type: int
    lengths: tuple[int, ...]
    batch: tuple[int, ...]  # the leading (not transformed) dimensions
    in_dims: tuple[int, ...]  # the operand's transformed dimensions
    out_dims: tuple[int, ...]  # the result's transformed dimensions
    passes: tuple[AxisPass, ...]
    out_type: PrimitiveType

    @property
    def rank(self) -> int:
        return len(self.lengths)

    @property
    def batches(self) -> int:
        return math.prod(self.batch)

    @property
    def points(self) -> int:
        return math.prod(self.lengths)

    @property
    def empty(self) -> bool:
        return math.prod(self.in_dims) == 0 or math.prod(self.out_dims) == 0 or self.batches == 0

    @property
    def scale(self) -> float:
        return 1.0 / self.points if self.fft_type in (IFFT, IRFFT) and self.points else 1.0

    @property
    def row_dims(self) -> tuple[int, ...]:
        """Extents of a row-major scratch block holding any pass's input or output."""
        return tuple(max(a, b) for a, b in zip(self.in_dims, self.out_dims, strict=True))

    def pass_work(self) -> int:
        """Terms summed by the passes of one batch element (CPU kernels)."""
        extents, total = list(self.in_dims), 0
        for p in self.passes:
            others = math.prod(e for a, e in enumerate(extents) if a != p.axis)
            total += others * p.n_out * p.n_in
            extents[p.axis] = p.n_out
        return total

    def direct_work(self) -> int:
        """Terms summed for one output element as a single nested sum (GPU kernels)."""
        return math.prod(self.in_dims)

    def describe(self) -> str:
        return f"{_NAMES[self.fft_type]} of length {{{','.join(map(str, self.lengths))}}}"


def plan_of(instr: Instruction) -> DftPlan:
    """The DFT plan of an fft instruction (UnsupportedError for what it cannot handle)."""
    kind = instr.attrs.fft_type or 0
    lengths = tuple(instr.attrs.fft_length or ())
    x, out = instr.operands[0].shape, instr.shape
    if kind not in _NAMES or not 1 <= len(lengths) <= 3 or not (x.is_array and out.is_array):
        raise UnsupportedError(f"%{instr.name}: fft_type {kind} with fft_length {lengths} has "
                               "no DFT kernel")
    for t in (x.element_type, out.element_type):
        if t not in (PrimitiveType.F32, PrimitiveType.F64, PrimitiveType.C64,
                     PrimitiveType.C128):
            raise UnsupportedError(f"%{instr.name}: fft on {t.name.lower()} elements")
    d = len(lengths)
    in_dims, out_dims = tuple(x.dims[-d:]), tuple(out.dims[-d:])
    return DftPlan(kind, lengths, tuple(x.dims[:-d]), in_dims, out_dims,
                   _passes(kind, lengths), out.element_type)


def _passes(kind: int, lengths: tuple[int, ...]) -> tuple[AxisPass, ...]:
    d = len(lengths)
    sign = -1 if kind in (FFT, RFFT) else 1
    full = [AxisPass(a, n, n, n, "complex", sign) for a, n in enumerate(lengths)]
    last = lengths[-1]
    if kind == RFFT:
        first = AxisPass(d - 1, last, last, last // 2 + 1, "r2c", -1)
        return (first, *reversed(full[:-1]))
    if kind == IRFFT:
        final = AxisPass(d - 1, last, last // 2 + 1, last, "c2r", 1)
        return (*full[:-1], final)
    # Innermost axis first: it is the contiguous one of the operand in the default layout.
    return tuple(reversed(full))


# ---- twiddles ----------------------------------------------------------------------------------

def twiddle_values(n: int) -> list[float]:
    """cos, sin of 2 pi j/n for j < n, interleaved. Angles are folded into the first octant
    first, so the values are as accurate as the libm's sin/cos there and quarter turns are
    exact (the Nyquist term of a c2r pass multiplies an imaginary part by sin(pi) = 0)."""
    out: list[float] = []
    for j in range(n):
        quadrant, rest = divmod(4 * j, n)  # angle = (quadrant + rest/n) * pi/2
        if 2 * rest <= n:
            c, s = math.cos(math.pi / 2 * rest / n), math.sin(math.pi / 2 * rest / n)
        else:
            s, c = math.cos(math.pi / 2 * (n - rest) / n), math.sin(math.pi / 2 * (n - rest) / n)
        for _ in range(quadrant):
            c, s = -s, c
        out += [c + 0.0, s + 0.0]  # + 0.0: no negative zeros
    return out


class Twiddles:
    """The constant table of one transform length in an emitted function."""

    def __init__(self, ctx, n: int):
        self.ctx, self.n = ctx, n
        self.table = ctx.table(("dft.twiddles", n), F64, twiddle_values(n))

    def at(self, j: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(cos, sin) of 2 pi j/n for 0 <= j < n."""
        b, ctx = self.ctx.builder, self.ctx
        base = b.shl(j, ctx.i64(1))
        out = []
        for k in range(2):
            index = base if k == 0 else b.or_(base, ctx.i64(1))
            ptr = b.gep(self.table, [ctx.i64(0), index], inbounds=True,
                        source_etype=self.table.value_type)
            out.append(b.load(ptr, typ=F64))
        return out[0], out[1]


# ---- sums --------------------------------------------------------------------------------------

def line_sum(ctx, p: AxisPass, k: ir.Value, load: Load) -> Parts:
    """Output k of pass `p` over the inputs `load(x)`, x < p.n_in (f64 parts)."""
    if p.kind == "c2r":
        return _c2r(ctx, p, k, load), None
    return _sum(ctx, p, k, load, 0, p.n_in, real_only=False)


def _sum(ctx, p: AxisPass, k, load: Load, start: int, stop: int, real_only: bool) -> Parts:
    """sum over start <= x < stop of e^(sign 2 pi i kx/n) z[x]; the real part alone if
    `real_only`."""
    b, m = ctx.builder, FMath(ctx, F64)
    tw = Twiddles(ctx, p.n)
    acc = [ctx.alloca(F64), None if real_only else ctx.alloca(F64)]
    phase = ctx.alloca(I64)
    for slot in acc:
        if slot is not None:
            b.store(m.c(0.0), slot)
    # k < n, so k * start (start 0 or 1) is already reduced.
    b.store(k if start else ctx.i64(0), phase)
    with ctx.loop(start, stop, "dft.x") as x:
        j = b.load(phase, typ=I64)
        c, s = tw.at(j)
        terms = _rotate(m, load(x), c, s, p.sign, real_only)
        for slot, term in zip(acc, terms, strict=True):
            if slot is not None:
                b.store(m.add(b.load(slot, typ=F64), term), slot)
        nxt = b.add(j, k)
        b.store(b.select(b.icmp_unsigned(">=", nxt, ctx.i64(p.n)),
                         b.sub(nxt, ctx.i64(p.n)), nxt), phase)
    return tuple(b.load(slot, typ=F64) if slot is not None else None for slot in acc)


def _rotate(m: FMath, z: Parts, c, s, sign: int, real_only: bool) -> Parts:
    """(c + i sign s) * z, part by part (the real part alone if `real_only`)."""
    zr, zi = z
    if zi is None:
        re = m.mul(zr, c)
        if real_only:
            return re, None
        im = m.mul(zr, s)
        return re, (im if sign > 0 else m.b.fneg(im))
    # re = zr c - sign zi s, im = zi c + sign zr s
    zs = m.mul(zi, s)
    re = m.fma(zr, c, m.b.fneg(zs) if sign > 0 else zs)
    if real_only:
        return re, None
    rs = m.mul(zr, s)
    return re, m.fma(zi, c, rs if sign > 0 else m.b.fneg(rs))


def _c2r(ctx, p: AxisPass, k, load: Load) -> ir.Value:
    """Real output k of an inverse c2r pass: Re z[0] + 2 Re(sum of the interior terms)
    + (even n) Re z[n/2] (-1)^k; the other terms are the interior ones' conjugates."""
    b, m = ctx.builder, FMath(ctx, F64)
    interior = (p.n - 1) // 2
    total = load(ctx.i64(0))[0]
    if interior:
        inner, _ = _sum(ctx, p, k, load, 1, interior + 1, real_only=True)
        total = m.add(total, m.mul(inner, m.c(2.0)))
    if p.n % 2 == 0 and p.n > 0:
        nyquist = load(ctx.i64(p.n // 2))[0]
        odd = b.trunc(k, I1)
        total = m.add(total, b.select(odd, b.fneg(nyquist), nyquist))
    return total


def direct_element(ctx, plan: DftPlan, read: Callable, index: list[ir.Value]) -> ir.Value:
    """Output element `index` (batch then transformed dims) as one nested sum over the
    operand: the last pass is the outermost sum, the first reads the operand."""
    nb = len(plan.batch)
    batch = list(index[:nb])

    def level(depth: int, idx: list[ir.Value]) -> Parts:
        if depth == 0:
            return to_parts(ctx, read(batch + idx))
        p = plan.passes[depth - 1]

        def load(x: ir.Value) -> Parts:
            inner = list(idx)
            inner[p.axis] = x
            return level(depth - 1, inner)

        return line_sum(ctx, p, idx[p.axis], load)

    re, im = level(len(plan.passes), list(index[nb:]))
    return finish(ctx, plan, re, im)


# ---- element conversions -----------------------------------------------------------------------

def to_parts(ctx, value: ir.Value) -> Parts:
    """An operand element (complex struct or real) as f64 parts."""
    b = ctx.builder

    def wide(v: ir.Value) -> ir.Value:
        return v if v.type == F64 else b.fpext(v, F64)

    if isinstance(value.type, ir.LiteralStructType):
        re, im = complex_ir.parts(b, value)
        return wide(re), wide(im)
    return wide(value), None


def finish(ctx, plan: DftPlan, re: ir.Value, im: ir.Value | None) -> ir.Value:
    """A result element from its f64 parts: scaled (inverse transforms), in the result's
    element type."""
    b = ctx.builder
    et = elem_type(plan.out_type, complex_ok=True)
    part = et.part.value_type if et.is_complex else et.value_type
    scale = ir.Constant(F64, plan.scale)

    def narrow(v: ir.Value) -> ir.Value:
        v = b.fmul(v, scale) if plan.scale != 1.0 else v
        return b.fptrunc(v, F32) if part == F32 else v

    if not et.is_complex:
        return narrow(re)
    zero = ir.Constant(F64, 0.0)
    return complex_ir.pair(b, et.value_type, narrow(re), narrow(im if im is not None else zero))
