"""Complex lowerings of the arithmetic, comparison and structural opcodes (XLA semantics).

complex/real/imag build and take apart numbers; add, subtract and negate work part-wise;
multiply is (ar*br - ai*bi, ai*br + ar*bi) with one product of each part fused
(llvm.fmuladd: on FMA hardware this is what XLA CPU computes, whose LLVM contracts them);
divide is XLA's Smith's algorithm with its zero/infinity recovery; abs is overflow-free
(c64 through f64, where |z|^2 cannot overflow; c128 as max * sqrt(1 + (min/max)^2)) and a
NaN part makes it NaN even next to an infinity; sign is z / |z| (0 for 0); compare knows
EQ/NE only. Opcodes that only move elements reuse their ordinary lowerings
(`complex_agnostic`); transcendental functions are in complex_math.py.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ....errors import UnsupportedError
from ....ir import Instruction, Opcode
from ..compose import constant_generator, operand_index
from ..indexing import reshape_index
from ..memory import literal_table, load_element, major_to_minor, row_major
from ..nanbits import x86_nan
from ..registry import complex_agnostic, emits, emits_complex
from ..types import F32, F64, ElemType, elem_type
from .values import Cx

complex_agnostic(
    Opcode.BROADCAST, Opcode.TRANSPOSE, Opcode.COPY, Opcode.RESHAPE,
    Opcode.SLICE, Opcode.REVERSE, Opcode.PAD, Opcode.CONCATENATE, Opcode.IOTA, Opcode.TUPLE,
    Opcode.GET_TUPLE_ELEMENT, Opcode.DYNAMIC_SLICE, Opcode.DYNAMIC_UPDATE_SLICE, Opcode.GATHER,
    Opcode.MAP, Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.DOT, Opcode.CONVERT,
)

ComplexFn = Callable[[Cx, Instruction, list[ir.Value]], ir.Value]


def complex_type(instr: Instruction) -> ElemType:
    """The complex element type of the instruction (its result's, else its first operand's)."""
    for shape in (instr.shape, *(o.shape for o in instr.operands)):
        if shape.is_array and shape.dtype.is_complex:
            return elem_type(shape.element_type, complex_ok=True)
    raise UnsupportedError(f"%{instr.name} has no complex operand or result")


def complex_elementwise(fn: ComplexFn):
    """A lowering computing each element as fn(cx, instr, operand values)."""

    def lowering(ctx, instr: Instruction, gens):
        cx = Cx(ctx, complex_type(instr))

        def generate(index):
            return fn(cx, instr, [g(operand_index(instr, i, index)) for i, g in enumerate(gens)])

        return generate

    return lowering


def register(*opcodes: Opcode):
    """Register fn(cx, instr, values) as the complex elementwise lowering of `opcodes`."""

    def decorate(fn: ComplexFn) -> ComplexFn:
        emits_complex(*opcodes)(complex_elementwise(fn))
        return fn

    return decorate


# ---- building and taking apart ---------------------------------------------------------------

@register(Opcode.COMPLEX)
def _complex(cx: Cx, instr, v):
    return cx.make(*v)


@register(Opcode.REAL, Opcode.IMAG)
def _part(cx: Cx, instr, v):
    return cx.parts(v[0])[0 if instr.opcode == Opcode.REAL else 1]


@emits(Opcode.REAL, Opcode.IMAG)
def real_operand_part(ctx, instr, gens):
    """real/imag of a real number: itself and a zero of its type."""
    (gen,) = gens
    if instr.opcode == Opcode.REAL:
        return gen
    et = elem_type(instr.shape.element_type)
    if not et.is_float:
        raise UnsupportedError(f"imag %{instr.name} needs a float or complex operand")
    return constant_generator(ir.Constant(et.value_type, 0.0))


@register(Opcode.SELECT)
def _select(cx: Cx, instr, v):
    return cx.select(*v)


@emits_complex(Opcode.CONSTANT)
def constant(ctx, instr, gens):
    shape = instr.shape
    array = instr.attrs.literal.array
    if shape.rank == 0 or array.size == 1:
        z = complex(array.reshape(-1)[0])
        cx = Cx(ctx, elem_type(shape.element_type, complex_ok=True))
        return constant_generator(cx.const(z.real, z.imag))
    table = literal_table(ctx, ("literal", id(instr)), shape, array)
    logical = row_major(shape)
    return lambda index: load_element(ctx, logical, table, index)


@emits_complex(Opcode.BITCAST)
def bitcast(ctx, instr, gens):
    """A layout bitcast (same element type): the ordinary lowering's index remapping."""
    src, dst = instr.operands[0].shape, instr.shape
    if src.element_type != dst.element_type:
        raise UnsupportedError(f"bitcast %{instr.name} changes a complex element type")
    src_order, dst_order = major_to_minor(src), major_to_minor(dst)
    src_phys = [src.dims[d] for d in src_order]
    dst_phys = [dst.dims[d] for d in dst_order]
    (gen,) = gens

    def generate(index):
        phys = reshape_index(ctx, src_phys, dst_phys, [index[d] for d in dst_order])
        operand: list = [None] * len(src_order)
        for k, d in enumerate(src_order):
            operand[d] = phys[k]
        return gen(operand)

    return generate


# ---- arithmetic -------------------------------------------------------------------------------

@register(Opcode.ADD, Opcode.SUBTRACT)
def _add_sub(cx: Cx, instr, v):
    (ar, ai), (br, bi) = cx.parts(v[0]), cx.parts(v[1])
    op = cx.add if instr.opcode == Opcode.ADD else cx.sub
    return cx.make(op(ar, br), op(ai, bi))


@register(Opcode.NEGATE)
def _negate(cx: Cx, instr, v):
    re, im = cx.parts(v[0])
    return cx.make(cx.neg(re), cx.neg(im))


def multiply(cx: Cx, z: ir.Value, w: ir.Value) -> ir.Value:
    (ar, ai), (br, bi) = cx.parts(z), cx.parts(w)
    re = cx.fma(ar, br, cx.neg(cx.mul(ai, bi)))
    im = cx.fma(ai, br, cx.mul(ar, bi))
    # NaN parts as x86 computes them (the first NaN operand of each part's formula) where
    # the hardware would give its canonical NaN instead.
    return cx.make(x86_nan(cx.ctx, re, ar, br, ai, bi), x86_nan(cx.ctx, im, ai, br, ar, bi))


@register(Opcode.MULTIPLY)
def _multiply(cx: Cx, instr, v):
    return multiply(cx, *v)


def divide(cx: Cx, z: ir.Value, w: ir.Value) -> ir.Value:
    """Smith's algorithm (both scalings computed, one selected: no branches), then XLA's
    recovery of results that came out NaN in both parts."""
    (ar, ai), (br, bi) = cx.parts(z), cx.parts(w)
    r1 = cx.div(br, bi)  # for |br| < |bi|
    d1 = cx.fma(r1, br, bi)
    r2 = cx.div(bi, br)
    d2 = cx.fma(r2, bi, br)
    narrow = cx.lt(cx.abs(br), cx.abs(bi))
    re = cx.sel(narrow, cx.div(cx.fma(r1, ar, ai), d1), cx.div(cx.fma(r2, ai, ar), d2))
    im = cx.sel(narrow, cx.div(cx.fma(r1, ai, cx.neg(ar)), d1),
                cx.div(cx.fma(cx.neg(r2), ar, ai), d2))
    both_nan = cx.b.and_(cx.isnan(re), cx.isnan(im))
    result = cx.make(re, im)
    return cx.select(both_nan, _divide_special(cx, (ar, ai), (br, bi), result), result)


def _unit_infinity(cx: Cx, x: ir.Value) -> ir.Value:
    """±1 for ±inf, ±0 otherwise (the sign of x kept)."""
    return cx.copysign(cx.sel(cx.is_inf(x), cx.c(1.0), cx.c(0.0)), x)


def _divide_special(cx: Cx, a, w, nan_result: ir.Value) -> ir.Value:
    (ar, ai), (br, bi) = a, w
    b = cx.b
    inf = cx.c(float("inf"))
    zero = cx.c(0.0)
    signed_inf = cx.copysign(inf, br)
    by_zero = cx.make(cx.mul(signed_inf, ar), cx.mul(signed_inf, ai))
    zero_den = b.and_(b.and_(cx.eq(br, zero), cx.eq(bi, zero)),
                      b.not_(b.and_(cx.isnan(ar), cx.isnan(ai))))
    ur, ui = _unit_infinity(cx, ar), _unit_infinity(cx, ai)
    inf_over_finite = cx.make(cx.mul(inf, cx.add(cx.mul(ur, br), cx.mul(ui, bi))),
                              cx.mul(inf, cx.sub(cx.mul(ui, br), cx.mul(ur, bi))))
    inf_num = b.and_(b.or_(cx.is_inf(ar), cx.is_inf(ai)),
                     b.and_(cx.is_finite(br), cx.is_finite(bi)))
    vr, vi = _unit_infinity(cx, br), _unit_infinity(cx, bi)
    finite_over_inf = cx.make(cx.mul(zero, cx.add(cx.mul(ar, vr), cx.mul(ai, vi))),
                              cx.mul(zero, cx.sub(cx.mul(ai, vr), cx.mul(ar, vi))))
    inf_den = b.and_(b.or_(cx.is_inf(br), cx.is_inf(bi)),
                     b.and_(cx.is_finite(ar), cx.is_finite(ai)))
    out = cx.select(inf_den, finite_over_inf, nan_result)
    out = cx.select(inf_num, inf_over_finite, out)
    return cx.select(zero_den, by_zero, out)


@register(Opcode.DIVIDE)
def _divide(cx: Cx, instr, v):
    return divide(cx, *v)


# ---- magnitude ---------------------------------------------------------------------------------

def magnitude(cx: Cx, z: ir.Value) -> ir.Value:
    """|z| without overflow; NaN if a part is NaN (even if the other is infinite)."""
    re, im = cx.parts(z)
    b = cx.b
    if cx.ty == F32:
        x, y = b.fpext(re, F64), b.fpext(im, F64)
        wide = cx.ctx.call("llvm.sqrt.f64", [b.fadd(b.fmul(x, x), b.fmul(y, y))])
        return b.fptrunc(wide, F32)
    ar, ai = cx.abs(re), cx.abs(im)
    hi, lo = cx.fmax_nan(ar, ai), cx.fmin_nan(ar, ai)
    ratio = cx.div(lo, hi)
    result = cx.mul(hi, cx.sqrt(cx.add(cx.c(1.0), cx.mul(ratio, ratio))))
    # 0/0 (zero), inf/inf (both infinite) and NaN parts: min is the answer.
    return cx.sel(cx.isnan(result), lo, result)


@register(Opcode.ABS)
def _abs(cx: Cx, instr, v):
    return magnitude(cx, v[0])


@register(Opcode.SIGN)
def _sign(cx: Cx, instr, v):
    re, im = cx.parts(v[0])
    mag = magnitude(cx, v[0])
    unit = cx.make(cx.div(re, mag), cx.div(im, mag))
    return cx.select(cx.eq(mag, cx.c(0.0)), cx.const(0.0, 0.0), unit)


# ---- comparison -------------------------------------------------------------------------------

@register(Opcode.COMPARE)
def _compare(cx: Cx, instr, v):
    direction = instr.attrs.comparison_direction or ""
    (ar, ai), (br, bi) = cx.parts(v[0]), cx.parts(v[1])
    b = cx.b
    if direction == "EQ":
        return b.and_(cx.eq(ar, br), cx.eq(ai, bi))
    if direction == "NE":
        return b.or_(cx.ne_unordered(ar, br), cx.ne_unordered(ai, bi))
    raise UnsupportedError(f"compare %{instr.name}: complex numbers support only EQ and NE, "
                           f"not '{direction}'")


__all__ = ["complex_elementwise", "complex_type", "divide", "magnitude", "multiply", "register"]
