"""Collectives (simple forms), their async start/done pairs, and host I/O ops (tokens)."""

from __future__ import annotations

from ..opcodes import Opcode as O
from ..shape import Shape
from .common import (
    TOKEN,
    U32_SCALAR,
    arr,
    one_dim_attr,
    operand,
    same,
    shape_text,
    tup,
)
from .registry import fail, register


def _one_or_tuple(shapes: list[Shape]) -> Shape:
    return shapes[0] if len(shapes) == 1 else tup(shapes)


def _arrays(instr) -> list[Shape]:
    return [arr(s.element_type, s.dims) for s in
            (operand(instr, i) for i in range(len(instr.operands)))]


def _declared_leaf(instr, i: int, start: bool = False) -> Shape | None:
    """Declared output array i (inside element 1 of a start op's tuple), if the shape has it."""
    s = instr.shape
    if start:
        if not s.is_tuple or len(s.tuple_shapes) < 2:
            return None
        s = s.tuple_shapes[1]
    if len(instr.operands) > 1:
        return s.tuple_shapes[i] if s.is_tuple and i < len(s.tuple_shapes) else None
    return s if s.is_array else None


def _shard_count(instr, declared: Shape | None, dim: int, x: Shape, gather: bool) -> int:
    """Participants per group: from replica_groups, else from the declared result's size."""
    groups = instr.attrs.replica_groups
    if groups:
        return len(groups[0])
    if declared is None or dim >= declared.rank or not x.dims[dim] or not declared.dims[dim]:
        return 1
    big, small = (declared.dims[dim], x.dims[dim]) if gather else (x.dims[dim], declared.dims[dim])
    return -(-big // small)


def _gathered(instr, start: bool) -> list[Shape]:
    dim = one_dim_attr(instr, "all-gather dimension")
    out = []
    for i, x in enumerate(_arrays(instr)):
        if not 0 <= dim < x.rank:
            raise fail(f"all-gather dimension {dim} is out of range for {shape_text(x)}")
        n = _shard_count(instr, _declared_leaf(instr, i, start), dim, x, gather=True)
        out.append(arr(x.element_type, x.dims[:dim] + (x.dims[dim] * n,) + x.dims[dim + 1:]))
    return out


@register(O.ALL_GATHER, operands=(1, None))
def all_gather(instr):
    return _one_or_tuple(_gathered(instr, start=False))


@register(O.ALL_GATHER_START, operands=(1, None))
def all_gather_start(instr):
    return tup((_one_or_tuple(_arrays(instr)), _one_or_tuple(_gathered(instr, start=True))))


@register(O.ALL_REDUCE, O.ALL_REDUCE_START, operands=(1, None), called=1)
def all_reduce(instr):
    return _one_or_tuple(_arrays(instr))


@register(O.REDUCE_SCATTER, operands=(1, None), called=1)
def reduce_scatter(instr):
    dim = one_dim_attr(instr, "scatter dimension")
    out = []
    for i, x in enumerate(_arrays(instr)):
        if not 0 <= dim < x.rank:
            raise fail(f"scatter dimension {dim} is out of range for {shape_text(x)}")
        n = _shard_count(instr, _declared_leaf(instr, i), dim, x, gather=False)
        if x.dims[dim] % n:
            raise fail(f"scatter dimension size {x.dims[dim]} is not divisible by {n} shards")
        out.append(arr(x.element_type, x.dims[:dim] + (x.dims[dim] // n,) + x.dims[dim + 1:]))
    return _one_or_tuple(out)


@register(O.ALL_TO_ALL, operands=(1, None))
def all_to_all(instr):
    xs = _arrays(instr)
    if instr.attrs.dimensions:
        if len(xs) != 1:
            raise fail(f"array all-to-all takes 1 operand, got {len(xs)}")
        return xs[0]
    for i, x in enumerate(xs):
        if not same(x, xs[0]):
            raise fail(f"operand {i} {shape_text(x)} differs from operand 0 {shape_text(xs[0])}")
    return tup(xs)


@register(O.COLLECTIVE_BROADCAST, operands=(1, None))
def collective_broadcast(instr):
    return _one_or_tuple(_arrays(instr))


def _permute_operands(instr) -> tuple[Shape, Shape]:
    if len(instr.operands) == 1:
        x = operand(instr, 0)
        return x, x
    if len(instr.operands) == 4:
        return instr.operands[0].shape, instr.operands[1].shape
    raise fail(f"takes 1 or 4 operands, got {len(instr.operands)}")


@register(O.COLLECTIVE_PERMUTE, operands=(1, 4))
def collective_permute(instr):
    return _permute_operands(instr)[1]


@register(O.COLLECTIVE_PERMUTE_START, operands=(1, 4))
def collective_permute_start(instr):
    src, dst = _permute_operands(instr)
    declared = instr.shape.tuple_shapes if instr.shape.is_tuple else ()
    return tup((src, dst, U32_SCALAR, U32_SCALAR) + tuple(declared[4:]))


@register(O.RAGGED_ALL_TO_ALL, operands=6)
def ragged_all_to_all(instr):
    return operand(instr, 1, "output buffer")


def _tuple_element(instr, i: int) -> Shape:
    t = instr.operands[0].shape
    if not t.is_tuple or len(t.tuple_shapes) <= i:
        raise fail(f"operand must be a tuple with an element {i}, got {shape_text(t)}")
    return t.tuple_shapes[i]


@register(O.ALL_REDUCE_DONE)
def all_reduce_done(instr):
    return instr.operands[0].shape


@register(O.ALL_GATHER_DONE, O.COLLECTIVE_PERMUTE_DONE)
def start_done(instr):
    return _tuple_element(instr, 1)


@register(O.COPY_START)
def copy_start(instr):
    x = instr.operands[0].shape
    return tup((x, x, U32_SCALAR))


@register(O.COPY_DONE)
def copy_done(instr):
    return _tuple_element(instr, 0)


@register(O.REPLICA_ID, O.PARTITION_ID, operands=0)
def device_id(instr):
    return U32_SCALAR


def _token_operand(instr, i: int) -> None:
    if not instr.operands[i].shape.is_token:
        raise fail(f"operand {i} must be a token, got {shape_text(instr.operands[i].shape)}")


def _declared_data(instr, n: int) -> Shape:
    s = instr.shape
    if not s.is_tuple or len(s.tuple_shapes) != n:
        raise fail(f"result must be a tuple of {n} starting with the data, declared "
                   f"{shape_text(s)}")
    return s.tuple_shapes[0]


@register(O.INFEED)
def infeed(instr):
    _token_operand(instr, 0)
    return tup((_declared_data(instr, 2), TOKEN))


@register(O.OUTFEED, operands=2)
def outfeed(instr):
    _token_operand(instr, 1)
    return TOKEN


@register(O.SEND, operands=2)
def send(instr):
    _token_operand(instr, 1)
    return tup((instr.operands[0].shape, U32_SCALAR, TOKEN))


@register(O.RECV)
def recv(instr):
    _token_operand(instr, 0)
    return tup((_declared_data(instr, 3), U32_SCALAR, TOKEN))


@register(O.SEND_DONE)
def send_done(instr):
    return TOKEN


@register(O.RECV_DONE)
def recv_done(instr):
    return tup((_tuple_element(instr, 0), TOKEN))
