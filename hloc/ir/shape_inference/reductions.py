"""Reductions: reduce, reduce-window (both variadic), select-and-scatter; reducer signatures."""

from __future__ import annotations

from collections.abc import Sequence

from ..attrs import Window
from ..computation import Computation
from ..dtypes import PrimitiveType
from ..opcodes import Opcode as O
from ..shape import Shape
from .common import (
    P,
    arr,
    check_dims_valid,
    check_param_count,
    dims_attr,
    operand,
    program_result,
    shape_text,
    tup,
    type_name,
)
from .registry import fail, register


def check_reducer(comp: Computation, inits: Sequence[Shape], inputs: Sequence[PrimitiveType],
                  role: str = "reducer") -> list[Shape]:
    """A reducer of N inputs takes N accumulators then N input elements, all scalars, and
    returns N scalars (one, or a tuple of N). Returns the accumulator shapes."""
    n = len(inputs)
    params = check_param_count(comp, 2 * n, role)
    result = program_result(comp)
    if result.is_tuple:
        accs = list(result.tuple_shapes)
        if len(accs) != n:
            raise fail(f"{role} {comp.name} must return {n} value(s), returns {len(accs)}")
    elif n == 1:
        accs = [result]
    else:
        raise fail(f"{role} {comp.name} must return a tuple of {n} scalars, returns "
                   f"{shape_text(result)}")
    for i, acc in enumerate(accs):
        if not acc.is_array or acc.rank != 0:
            raise fail(f"{role} {comp.name} must return scalars, returns {shape_text(result)}")
        for what, s in ((f"parameter {i}", params[i]), (f"parameter {n + i}", params[n + i]),
                        (f"init value {i}", inits[i])):
            if not s.is_array or s.rank != 0 or s.element_type != acc.element_type:
                raise fail(f"{role} {comp.name} {what} has shape {shape_text(s)}, "
                           f"expected {type_name(acc)}[] like its result {i}")
        if inputs[i] != acc.element_type:
            raise fail(f"{role} {comp.name} result {i} is {type_name(acc)} but input {i} "
                       f"elements are {type_name(inputs[i])}")
    return accs


def window_output_dims(dims: Sequence[int], window: Window | None) -> list[int]:
    """Output size of sliding `window` over an array of `dims` (XLA's window arithmetic)."""
    wdims = window.dims if window is not None else ()
    if len(wdims) != len(dims):
        raise fail(f"window has {len(wdims)} dimensions, the operand has {len(dims)}")
    out = []
    for i, (n, w) in enumerate(zip(dims, wdims, strict=True)):
        if w.size <= 0 or w.stride <= 0 or w.base_dilation < 1 or w.window_dilation < 1:
            raise fail(f"window dimension {i} needs a positive size and stride and dilations "
                       f">= 1, got size={w.size} stride={w.stride} lhs_dilate={w.base_dilation} "
                       f"rhs_dilate={w.window_dilation}")
        base = (n - 1) * w.base_dilation + 1 if n > 0 else 0
        padded = w.padding_low + base + w.padding_high
        span = (w.size - 1) * w.window_dilation + 1
        out.append(0 if padded < span else (padded - span) // w.stride + 1)
    return out


def _split_variadic(instr, what: str) -> tuple[list[Shape], list[Shape]]:
    n = len(instr.operands) // 2
    inputs = [operand(instr, i, f"{what} {i}") for i in range(n)]
    inits = [operand(instr, n + i, f"init value {i}") for i in range(n)]
    for i, s in enumerate(inputs[1:], 1):
        if s.dims != inputs[0].dims:
            raise fail(f"all inputs must have the same dimensions; input 0 is "
                       f"{shape_text(inputs[0])}, input {i} is {shape_text(s)}")
    return inputs, inits


def _results(instr, accs: list[Shape], dims: Sequence[int]) -> Shape:
    shapes = [arr(a.element_type, dims) for a in accs]
    root = program_result(instr.called[0])
    return tup(shapes) if root.is_tuple else shapes[0]


@register(O.REDUCE, operands=(2, None), parity="even", called=1)
def reduce(instr):
    inputs, inits = _split_variadic(instr, "input")
    dims = dims_attr(instr)
    check_dims_valid(dims, inputs[0].rank, "reduced dimension")
    accs = check_reducer(instr.called[0], inits, [s.element_type for s in inputs])
    kept = [d for i, d in enumerate(inputs[0].dims) if i not in dims]
    return _results(instr, accs, kept)


@register(O.REDUCE_WINDOW, operands=(2, None), parity="even", called=1)
def reduce_window(instr):
    inputs, inits = _split_variadic(instr, "input")
    accs = check_reducer(instr.called[0], inits, [s.element_type for s in inputs])
    out = window_output_dims(inputs[0].dims, instr.attrs.window)
    return _results(instr, accs, out)


@register(O.SELECT_AND_SCATTER, operands=3, called=2)
def select_and_scatter(instr):
    x, source, init = (operand(instr, 0), operand(instr, 1, "source"),
                       operand(instr, 2, "init value"))
    select, scatter = instr.called
    params = check_param_count(select, 2, "select")
    if not _is_scalar_of(program_result(select), P.PRED):
        raise fail(f"select computation {select.name} must return pred[], returns "
                   f"{shape_text(program_result(select))}")
    for i, p in enumerate(params):
        if not _is_scalar_of(p, x.element_type):
            raise fail(f"select computation {select.name} parameter {i} must be "
                       f"{type_name(x)}[], is {shape_text(p)}")
    check_reducer(scatter, [init], [source.element_type], "scatter computation")
    window_dims = window_output_dims(x.dims, instr.attrs.window)
    if tuple(window_dims) != source.dims:
        raise fail(f"source {shape_text(source)} must have the windowed operand's dimensions "
                   f"[{','.join(map(str, window_dims))}]")
    return arr(x.element_type, x.dims)


def _is_scalar_of(s: Shape, et: PrimitiveType) -> bool:
    return s.is_array and s.rank == 0 and s.element_type == et
