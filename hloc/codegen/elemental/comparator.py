"""Sort comparators: a comparator computation applied to two records.

A sort's comparator takes one (lhs, rhs) parameter pair per operand — parameters 2k and 2k+1
are operand k's two elements — and returns pred: whether lhs goes strictly before rhs.
Both the CPU and the CUDA sort kernels emit it through here.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from ...ir import Computation
from .compose import emit_scalar_computation


def interleave(x: Sequence[ir.Value], y: Sequence[ir.Value]) -> list[ir.Value]:
    """The comparator's arguments for records x and y: x0, y0, x1, y1, ..."""
    return [v for pair in zip(x, y, strict=True) for v in pair]


def emit_before(ctx, comp: Computation, x: Sequence[ir.Value], y: Sequence[ir.Value]) -> ir.Value:
    """The i1 `comp(x, y)`: record x (one value per operand) goes strictly before record y."""
    return emit_scalar_computation(ctx, comp, interleave(x, y))[0]
