"""Algebraic-simplifier rules for dynamic slicing, dot, convolution and reduce."""

from __future__ import annotations

import math
from dataclasses import replace

from ...ir import Instruction, Opcode, Shape, SliceDim
from ...ir.attrs import Window
from ..rewrite import P, RuleTable, is_splat_of, new, splat_value

Op = Opcode
SLICING_RULES = RuleTable("simplifier-slicing")
rule = SLICING_RULES.rule


# ---- dynamic-slice / dynamic-update-slice ----------------------------------------------------
def constant_indices(indices: list[Instruction], rank: int) -> list[int] | None:
    """Start indices as ints when they are constants: `rank` scalars or one rank-1 vector."""
    if len(indices) == 1 and rank != 1 and indices[0].shape.rank == 1:
        v = indices[0].literal.array if indices[0].opcode == Op.CONSTANT else None
        return [int(x) for x in v] if v is not None and v.size == rank else None
    if len(indices) != rank:
        return None
    values = [splat_value(i) if i.shape.rank == 0 else None for i in indices]
    if any(v is None for v in values):
        return None
    return [int(v) for v in values]


@rule(P(Op.DYNAMIC_SLICE))
def dynamic_slice_constant(instr):
    """dynamic-slice(x, constants) → slice, starts clamped into [0, dim - size] like XLA."""
    x = instr.operands[0]
    starts = constant_indices(instr.operands[1:], x.shape.rank)
    if starts is None:
        return None
    sizes = instr.attrs.dynamic_slice_sizes
    dims = []
    for s, n, d in zip(starts, sizes, x.shape.dims, strict=True):
        start = min(max(s, 0), d - n)
        dims.append(SliceDim(start, start + n, 1))
    return new(Op.SLICE, instr.shape, [x], slice=tuple(dims))


@rule(P(Op.DYNAMIC_UPDATE_SLICE,
        where=lambda i: i.operands[1].shape.dims == i.operands[0].shape.dims))
def dynamic_update_slice_full(instr):
    """dynamic-update-slice(x, u, ...) → u when u covers x (every start clamps to 0)."""
    return instr.operands[1]


# ---- dot -------------------------------------------------------------------------------------
def _as_batch_free(x: Instruction, batch, contracting) -> Instruction:
    """x with its size-1 contracting dimensions dropped and the rest ordered (batch..., free...)."""
    rank = x.shape.rank
    kept = [d for d in range(rank) if d not in contracting]
    if contracting:
        # Dropping size-1 dimensions keeps the row-major order: a reshape, never a transpose.
        x = new(Op.RESHAPE, x.shape.with_dims([x.shape.dims[d] for d in kept]), [x])
    free = [d for d in kept if d not in batch]
    perm = tuple(kept.index(d) for d in (*batch, *free))
    if perm != tuple(range(len(kept))):
        x = new(Op.TRANSPOSE, x.shape.with_dims([x.shape.dims[p] for p in perm]), [x],
                dimensions=perm)
    return x


def _degenerate_dot(instr) -> bool:
    lhs, rhs = instr.operands
    dn = instr.attrs.dot_dnums
    types = {lhs.shape.element_type, rhs.shape.element_type, instr.shape.element_type}
    if dn is None or len(types) != 1 or instr.shape.dtype.kind not in ("int", "uint", "float"):
        return False
    return all(lhs.shape.dims[d] == 1 for d in dn.lhs_contracting_dimensions)


@rule(P(Op.DOT, where=_degenerate_dot))
def dot_degenerate(instr):
    """dot whose contracting dimensions all have size 1 → multiply of two broadcasts: each
    output element is then a single product (XLA does the same; a -0.0 product stays -0.0)."""
    lhs, rhs = instr.operands
    dn = instr.attrs.dot_dnums
    nb = len(dn.lhs_batch_dimensions)
    left = _as_batch_free(lhs, dn.lhs_batch_dimensions, dn.lhs_contracting_dimensions)
    right = _as_batch_free(rhs, dn.rhs_batch_dimensions, dn.rhs_contracting_dimensions)
    n_left = left.shape.rank
    out = instr.shape
    lb = new(Op.BROADCAST, out, [left], dimensions=tuple(range(n_left)))
    rb = new(Op.BROADCAST, out, [right],
             dimensions=tuple(range(nb)) + tuple(range(n_left, out.rank)))
    return new(Op.MULTIPLY, out, [lb, rb])


# ---- convolution ----------------------------------------------------------------------------
def _folds_into_window(conv: Instruction) -> bool:
    """conv's input is a pad with (bitwise) zero that only grows spatial dimensions, none base-dilated:
    the convolution's own zero padding can do it (XLA's FoldConvInputPad)."""
    pad, window, dn = conv.operands[0], conv.attrs.window, conv.attrs.conv_dnums
    if pad.opcode != Op.PAD or window is None or dn is None:
        return False
    if not is_splat_of(pad.operands[1], 0):
        return False  # not all-zero bits: a -0.0 pad could leave -0.0 where padding gives +0.0
    spatial = dict(zip(dn.input_spatial_dimensions, window.dims, strict=True))
    for d, p in enumerate(pad.attrs.padding):
        wd = spatial.get(d)
        if p.interior or p.low < 0 or p.high < 0 or (wd is None and (p.low or p.high)):
            return False
        if wd is not None and (wd.base_dilation != 1 or wd.padding_low < 0 or wd.padding_high < 0):
            return False
    return True


@rule(P(Op.CONVOLUTION, where=_folds_into_window))
def convolution_pad_input(instr):
    """convolution(pad(x, 0), w) → convolution(x, w), the pad added to the window's padding.
    The padded input is never materialized (in MobileNet-style stride-2 blocks it is the
    largest buffer of the model)."""
    pad, kernel = instr.operands
    dims = list(instr.attrs.window.dims)
    for i, d in enumerate(instr.attrs.conv_dnums.input_spatial_dimensions):
        p = pad.attrs.padding[d]
        dims[i] = replace(dims[i], padding_low=dims[i].padding_low + p.low,
                          padding_high=dims[i].padding_high + p.high)
    attrs = replace(instr.attrs, window=Window(tuple(dims)))
    return Instruction(Op.CONVOLUTION, instr.shape, [pad.operands[0], kernel], attrs=attrs)


# ---- reduce ----------------------------------------------------------------------------------
def reducer_opcode(comp) -> Opcode | None:
    """The opcode of a reducer computing `op(p0, p1)` on its two scalar parameters."""
    root = comp.root
    if root is None or comp.num_parameters != 2 or len(root.operands) != 2:
        return None
    if {o.opcode for o in root.operands} != {Op.PARAMETER} or root.operands[0] is root.operands[1]:
        return None
    return root.opcode


def _identity(opcode: Opcode, shape: Shape):
    """The identity element of a reducer op in `shape`'s element type, or None."""
    kind = shape.dtype.kind
    if kind == "float":
        table = {Op.ADD: 0.0, Op.MULTIPLY: 1.0, Op.MAXIMUM: -math.inf, Op.MINIMUM: math.inf}
    elif kind in ("int", "uint"):
        low, high = shape.dtype.int_range
        table = {Op.ADD: 0, Op.MULTIPLY: 1, Op.MAXIMUM: low, Op.MINIMUM: high,
                 Op.OR: 0, Op.XOR: 0, Op.AND: -1 if kind == "int" else high}
    elif kind == "pred":
        table = {Op.AND: True, Op.OR: False, Op.MAXIMUM: False, Op.MINIMUM: True, Op.XOR: False}
    else:
        return None
    return table.get(opcode)


def _reduces_nothing(instr) -> bool:
    if len(instr.operands) != 2 or instr.shape.is_tuple:
        return False
    x = instr.operands[0]
    return all(x.shape.dims[d] == 1 for d in instr.dimensions)


@rule(P(Op.REDUCE, where=_reduces_nothing))
def reduce_trivial(instr):
    """reduce over no dimensions or only size-1 ones, init the reducer's identity → reshape(x).
    As in XLA, a float sum's ±0 init counts as the identity (so -0.0 may come out as -0.0)."""
    x, init = instr.operands
    op = reducer_opcode(instr.called[0])
    value = splat_value(init)
    identity = _identity(op, init.shape) if op is not None else None
    if value is None or identity is None or value != identity:
        return None
    if x.shape.dims == instr.shape.dims:
        return x
    return new(Op.RESHAPE, instr.shape, [x])
