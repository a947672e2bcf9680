"""Ops defined by called computations or by their operands' structure: while, conditional, call,
fusion, map, sort, topk, custom-call, tuple, get-tuple-element, async wrappers, tokens."""

from __future__ import annotations

from ..opcodes import Opcode as O
from ..shape import Shape
from .common import (
    PRED_SCALAR,
    TOKEN,
    P,
    arr,
    check_dims_valid,
    check_param_count,
    one_dim_attr,
    operand,
    program_params,
    program_result,
    same,
    shape_text,
    tup,
    type_name,
)
from .registry import fail, register


def _match(comp, index: int, param: Shape, arg: Shape, role: str) -> None:
    if not same(param, arg):
        raise fail(f"{role} computation {comp.name} parameter {index} has shape "
                   f"{shape_text(param)} but is passed {shape_text(arg)}")


@register(O.WHILE, called=2)
def while_(instr):
    body, cond = instr.while_body, instr.while_condition
    state = instr.operands[0].shape
    for comp, role in ((cond, "condition"), (body, "body")):
        (param,) = check_param_count(comp, 1, role)
        _match(comp, 0, param, state, role)
    if not same(program_result(cond), PRED_SCALAR):
        raise fail(f"condition computation {cond.name} must return pred[], returns "
                   f"{shape_text(program_result(cond))}")
    if not same(program_result(body), state):
        raise fail(f"body computation {body.name} must return the loop state "
                   f"{shape_text(state)}, returns {shape_text(program_result(body))}")
    return state


@register(O.CONDITIONAL, operands=(2, None), called=(1, None))
def conditional(instr):
    index = instr.operands[0].shape
    branches = instr.called
    if same(index, PRED_SCALAR):
        if len(branches) != 2:
            raise fail(f"a pred-indexed conditional needs 2 branches, has {len(branches)}")
    elif not same(index, arr(P.S32, ())):
        raise fail(f"branch index must be pred[] or s32[], got {shape_text(index)}")
    if len(instr.operands) != len(branches) + 1:
        raise fail(f"needs one operand per branch ({len(branches)}) after the index, "
                   f"got {len(instr.operands) - 1}")
    result = program_result(branches[0])
    for j, comp in enumerate(branches):
        (param,) = check_param_count(comp, 1, f"branch {j}")
        _match(comp, 0, param, instr.operands[j + 1].shape, f"branch {j}")
        if not same(program_result(comp), result):
            raise fail(f"branch {j} ({comp.name}) returns {shape_text(program_result(comp))} "
                       f"but branch 0 returns {shape_text(result)}")
    return result


def _call_like(instr, role: str) -> Shape:
    comp = instr.called[0]
    params = check_param_count(comp, len(instr.operands), role)
    for i, (p, o) in enumerate(zip(params, instr.operands, strict=True)):
        _match(comp, i, p, o.shape, role)
    return program_result(comp)


@register(O.CALL, operands=(0, None), called=1)
def call(instr):
    return _call_like(instr, "called")


@register(O.FUSION, operands=(0, None), called=1)
def fusion(instr):
    return _call_like(instr, "fused")


@register(O.MAP, operands=(1, None), called=1)
def map_(instr):
    comp = instr.called[0]
    xs = [operand(instr, i) for i in range(len(instr.operands))]
    for i, s in enumerate(xs):
        if s.dims != xs[0].dims:
            raise fail(f"operand {i} {shape_text(s)} differs in dimensions from operand 0 "
                       f"{shape_text(xs[0])}")
    dims = instr.attrs.dimensions
    if dims is not None and tuple(dims) != tuple(range(xs[0].rank)):
        raise fail(f"map dimensions must be all operand dimensions in order, got {dims}")
    params = check_param_count(comp, len(xs), "mapped")
    for i, (p, s) in enumerate(zip(params, xs, strict=True)):
        if not same(p, arr(s.element_type, ())):
            raise fail(f"mapped computation {comp.name} parameter {i} must be "
                       f"{type_name(s)}[], is {shape_text(p)}")
    result = program_result(comp)
    if not result.is_array or result.rank != 0:
        raise fail(f"mapped computation {comp.name} must return a scalar, returns "
                   f"{shape_text(result)}")
    return arr(result.element_type, xs[0].dims)


@register(O.SORT, operands=(1, None), called=1)
def sort(instr):
    xs = [operand(instr, i) for i in range(len(instr.operands))]
    dim = one_dim_attr(instr, "sort dimension")
    check_dims_valid((dim,), xs[0].rank, "sort dimension")
    for i, s in enumerate(xs):
        if s.dims != xs[0].dims:
            raise fail(f"operand {i} {shape_text(s)} differs in dimensions from operand 0 "
                       f"{shape_text(xs[0])}")
    comp = instr.called[0]
    params = check_param_count(comp, 2 * len(xs), "comparator")
    for k, p in enumerate(params):
        et = xs[k // 2].element_type
        if not same(p, arr(et, ())):
            raise fail(f"comparator {comp.name} parameter {k} must be {type_name(et)}[], "
                       f"is {shape_text(p)}")
    if not same(program_result(comp), PRED_SCALAR):
        raise fail(f"comparator {comp.name} must return pred[], returns "
                   f"{shape_text(program_result(comp))}")
    shapes = [arr(s.element_type, s.dims) for s in xs]
    return shapes[0] if len(shapes) == 1 else tup(shapes)


@register(O.TOPK)
def topk(instr):
    x = operand(instr, 0)
    k = instr.attrs.k
    if x.rank < 1:
        raise fail("operand must have rank >= 1")
    if k is None or k < 0 or k > x.dims[-1]:
        raise fail(f"k={k} must be in [0, {x.dims[-1]}] (the last dimension of {shape_text(x)})")
    dims = x.dims[:-1] + (k,)
    return tup((arr(x.element_type, dims), arr(P.S32, dims)))


@register(O.CUSTOM_CALL, operands=(0, None), called=(0, None))
def custom_call(instr):
    """The declared shape is the contract with the target; only aliasing is checkable."""
    for alias in instr.attrs.output_operand_aliasing or ():
        if not 0 <= alias.operand_index < len(instr.operands):
            raise fail(f"output_to_operand_aliasing names operand {alias.operand_index}, "
                       f"there are {len(instr.operands)}")
        src = _subshape(instr.operands[alias.operand_index].shape, alias.operand_shape_index,
                        f"operand {alias.operand_index}")
        dst = _subshape(instr.shape, alias.output_shape_index, "the output")
        if not same(src, dst):
            raise fail(f"aliased output {alias.output_shape_index} {shape_text(dst)} and "
                       f"operand {alias.operand_index} {shape_text(src)} differ")
    return instr.shape


def _subshape(s: Shape, index, what: str) -> Shape:
    for i in index:
        if not s.is_tuple or not 0 <= i < len(s.tuple_shapes):
            raise fail(f"shape index {tuple(index)} is not valid in {what}")
        s = s.tuple_shapes[i]
    return s


@register(O.TUPLE, operands=(0, None))
def tuple_(instr):
    return tup(o.shape for o in instr.operands)


@register(O.GET_TUPLE_ELEMENT)
def get_tuple_element(instr):
    t = instr.operands[0].shape
    i = instr.attrs.tuple_index
    if not t.is_tuple:
        raise fail(f"operand must be a tuple, got {shape_text(t)}")
    if i is None or not 0 <= i < len(t.tuple_shapes):
        raise fail(f"index {i} is out of range for a tuple of {len(t.tuple_shapes)}")
    return t.tuple_shapes[i]


@register(O.AFTER_ALL, operands=(0, None))
def after_all(instr):
    for i, o in enumerate(instr.operands):
        if not o.shape.is_token:
            raise fail(f"operand {i} must be a token, got {shape_text(o.shape)}")
    return TOKEN


@register(O.ADD_DEPENDENCY, operands=2)
def add_dependency(instr):
    if not instr.operands[1].shape.is_token:
        raise fail(f"operand 1 must be a token, got {shape_text(instr.operands[1].shape)}")
    return instr.operands[0].shape


def _async_shape(instr, shape: Shape) -> Shape:
    """Async values are (operands tuple, result, context...) of the wrapped computation."""
    if not shape.is_tuple or len(shape.tuple_shapes) < 2:
        raise fail(f"async shape must be a tuple of at least 2, got {shape_text(shape)}")
    if not instr.called:  # async-update/-done may leave the wrapped computation implicit
        return shape
    comp = instr.called[0]
    params = tup(program_params(comp))
    if not same(shape.tuple_shapes[0], params):
        raise fail(f"async shape element 0 {shape_text(shape.tuple_shapes[0])} must match the "
                   f"wrapped computation's parameters {shape_text(params)}")
    if not same(shape.tuple_shapes[1], program_result(comp)):
        raise fail(f"async shape element 1 {shape_text(shape.tuple_shapes[1])} must match the "
                   f"wrapped computation's result {shape_text(program_result(comp))}")
    return shape


@register(O.ASYNC_START, operands=(0, None), called=1)
def async_start(instr):
    shape = _async_shape(instr, instr.shape)
    args = tup(o.shape for o in instr.operands)
    if not same(shape.tuple_shapes[0], args):
        raise fail(f"operands {shape_text(args)} do not match the wrapped computation's "
                   f"parameters {shape_text(shape.tuple_shapes[0])}")
    return shape


@register(O.ASYNC_UPDATE, called=(0, 1))
def async_update(instr):
    return _async_shape(instr, instr.operands[0].shape)


@register(O.ASYNC_DONE, called=(0, 1))
def async_done(instr):
    return _async_shape(instr, instr.operands[0].shape).tuple_shapes[1]
