"""Leaves and type changes: parameter, constant, iota, rng*, convert, bitcast-convert,
reduce-precision, stochastic-convert."""

from __future__ import annotations

from .. import dtypes
from ..opcodes import Opcode as O
from .common import (
    P,
    arr,
    check_dims_valid,
    is_float,
    kind,
    one_dim_attr,
    operand,
    shape_text,
    tup,
    type_name,
)
from .registry import fail, register


@register(O.PARAMETER, operands=0)
def parameter(instr):
    n = instr.attrs.parameter_number
    if n is None or n < 0:
        raise fail(f"parameter number must be set and non-negative, got {n}")
    return instr.shape


@register(O.CONSTANT, operands=0)
def constant(instr):
    """The literal's shape. HLO text may elide large values (`constant({...})`): such a constant
    keeps its declared shape here; stages that need the data report it as unsupported."""
    lit = instr.attrs.literal
    if lit is None:
        return instr.shape
    return lit.shape.without_layout()


@register(O.IOTA, operands=0)
def iota(instr):
    s = instr.shape
    if not s.is_array or s.rank == 0:
        raise fail(f"result must be an array of rank >= 1, declared {shape_text(s)}")
    check_dims_valid((one_dim_attr(instr, "iota dimension"),), s.rank, "iota dimension")
    if kind(s) not in ("int", "uint", "float", "complex"):
        raise fail(f"element type must be integral, floating-point or complex, got {type_name(s)}")
    return arr(s.element_type, s.dims)


_UNIFORM_KINDS = frozenset({"int", "uint", "float", "pred"})


@register(O.RNG, operands=2)
def rng(instr):
    a, b = operand(instr, 0, "a"), operand(instr, 1, "b")
    if a.rank != 0 or b.rank != 0:
        raise fail(f"parameters must be scalars, got {shape_text(a)} and {shape_text(b)}")
    out = instr.shape
    if not out.is_array or not (a.element_type == b.element_type == out.element_type):
        raise fail(f"parameters {shape_text(a)}, {shape_text(b)} and result {shape_text(out)} "
                   f"must share one element type")
    dist = instr.attrs.distribution
    if dist == 2 and not is_float(a):
        raise fail(f"normal distribution needs a floating-point type, got {type_name(a)}")
    if dist not in (1, 2) or kind(a) not in _UNIFORM_KINDS:
        raise fail(f"unsupported distribution {dist} for {type_name(a)}")
    return arr(out.element_type, out.dims)


@register(O.RNG_BIT_GENERATOR)
def rng_bit_generator(instr):
    state = operand(instr, 0, "state")
    out = instr.shape
    if not out.is_tuple:
        return out
    if len(out.tuple_shapes) != 2:
        raise fail(f"result must be a (state, values) tuple, declared {shape_text(out)}")
    values = out.tuple_shapes[1]
    if not values.is_array or kind(values) not in ("int", "uint"):
        raise fail(f"generated values must be an integral array, declared {shape_text(values)}")
    return tup((arr(state.element_type, state.dims), arr(values.element_type, values.dims)))


@register(O.RNG_GET_AND_UPDATE_STATE, operands=0)
def rng_get_and_update_state(instr):
    return arr(P.U64, (2,))


@register(O.CONVERT)
def convert(instr):
    x, out = operand(instr, 0), instr.shape
    if not out.is_array:
        raise fail(f"result must be an array, declared {shape_text(out)}")
    return arr(out.element_type, x.dims)


@register(O.BITCAST_CONVERT)
def bitcast_convert(instr):
    """Same bits reinterpreted; a wider input gains a minor dimension, a narrower input loses
    its minor dimension (which must equal the width ratio)."""
    x, out = operand(instr, 0), instr.shape
    if not out.is_array:
        raise fail(f"result must be an array, declared {shape_text(out)}")
    if (kind(x) == "complex") != (kind(out) == "complex"):
        raise fail(f"cannot bitcast between complex and real types ({type_name(x)} to "
                   f"{type_name(out)})")
    bits_in, bits_out = dtypes.info(x.element_type).bits, dtypes.info(out.element_type).bits
    if max(bits_in, bits_out) % min(bits_in, bits_out) != 0:
        raise fail(f"bit widths {bits_in} and {bits_out} do not divide")
    if bits_in > bits_out:
        return arr(out.element_type, x.dims + (bits_in // bits_out,))
    if bits_in < bits_out:
        ratio = bits_out // bits_in
        if x.rank < 1 or x.dims[-1] != ratio:
            raise fail(f"converting {type_name(x)} to the wider {type_name(out)} needs a minor "
                       f"dimension of size {ratio}, operand is {shape_text(x)}")
        return arr(out.element_type, x.dims[:-1])
    return arr(out.element_type, x.dims)


@register(O.REDUCE_PRECISION)
def reduce_precision(instr):
    x = operand(instr, 0)
    if not is_float(x):
        raise fail(f"operand must be floating-point, got {type_name(x)}")
    e, m = instr.attrs.exponent_bits, instr.attrs.mantissa_bits
    if e is None or m is None or e < 1 or m < 0:
        raise fail(f"needs exponent_bits >= 1 and mantissa_bits >= 0, got {e} and {m}")
    return arr(x.element_type, x.dims)


@register(O.STOCHASTIC_CONVERT, operands=2)
def stochastic_convert(instr):
    x, r, out = operand(instr, 0), operand(instr, 1, "random bits"), instr.shape
    if not is_float(x) or kind(r) != "uint":
        raise fail(f"needs a floating-point operand and unsigned random bits, got "
                   f"{type_name(x)} and {type_name(r)}")
    if dtypes.info(x.element_type).bits != dtypes.info(r.element_type).bits or x.dims != r.dims:
        raise fail(f"random bits {shape_text(r)} must match the operand {shape_text(x)} in "
                   f"width and dimensions")
    if not out.is_array:
        raise fail(f"result must be an array, declared {shape_text(out)}")
    return arr(out.element_type, x.dims)
