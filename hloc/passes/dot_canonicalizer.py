"""Dot canonicalization: every dot becomes one batched matrix product, [B,M,K] x [B,K,N].

Backends then need a single Gemm form. Operands are transposed so batch dimensions come first
(in pairing order), then the free dimensions, then the contracting ones (lhs) or contracting
then free (rhs), and reshaped to collapse each group into one dimension: B (only when the dot
has batch dimensions), M, K, N (size 1 when a group is empty). The [B,M,N] product is reshaped
back to the original result, whose dimension order (batch, lhs free, rhs free) it already has.
"""

from __future__ import annotations

import math

from ..ir import DotDimensionNumbers, Instruction, Module, Opcode, Shape
from ..util.record import dataclass
from .base import Pass, register_pass
from .rewrite import P, RuleTable, new, rewrite_module

Op = Opcode
DOT_RULES = RuleTable("dot-canonicalizer")


def canonical_dnums(batched: bool) -> DotDimensionNumbers:
    if batched:
        return DotDimensionNumbers((2,), (1,), (0,), (0,))
    return DotDimensionNumbers((1,), (0,))


def is_canonical(dot: Instruction) -> bool:
    """lhs [B?,M,K], rhs [B?,K,N]: ranks 2 (or 3 with one batch dimension), canonical dnums."""
    dn = dot.attrs.dot_dnums
    lhs, rhs = dot.operands
    batched = bool(dn.lhs_batch_dimensions)
    rank = 3 if batched else 2
    return (lhs.shape.rank == rank and rhs.shape.rank == rank and dot.shape.rank == rank
            and dn == canonical_dnums(batched))


def _group(x: Instruction, groups: list[tuple[int, ...]]) -> Instruction:
    """x transposed to the concatenated dimension groups, then reshaped to one dimension per
    group (empty groups become size-1 dimensions)."""
    order = tuple(d for g in groups for d in g)
    if order != tuple(range(x.shape.rank)):
        x = new(Op.TRANSPOSE, x.shape.with_dims([x.shape.dims[d] for d in order]), [x],
                dimensions=order)
    dims = [math.prod(x.shape.dims[d] for d in g) if g else 1 for g in _positions(groups)]
    if tuple(dims) != x.shape.dims:
        x = new(Op.RESHAPE, x.shape.with_dims(dims), [x])
    return x


def _positions(groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The groups renumbered to positions after the transpose (dims are then in order)."""
    out, n = [], 0
    for g in groups:
        out.append(tuple(range(n, n + len(g))))
        n += len(g)
    return out


def _free(rank: int, *used: tuple[int, ...]) -> tuple[int, ...]:
    taken = {d for u in used for d in u}
    return tuple(d for d in range(rank) if d not in taken)


@DOT_RULES.rule(P(Op.DOT, where=lambda i: i.attrs.dot_dnums is not None and not is_canonical(i)))
def canonicalize_dot(dot: Instruction):
    """dot → reshape(dot([B,M,K], [B,K,N])) with transposes/reshapes on the operands."""
    dn = dot.attrs.dot_dnums
    lhs, rhs = dot.operands
    lb, lc = tuple(dn.lhs_batch_dimensions), tuple(dn.lhs_contracting_dimensions)
    rb, rc = tuple(dn.rhs_batch_dimensions), tuple(dn.rhs_contracting_dimensions)
    lf, rf = _free(lhs.shape.rank, lb, lc), _free(rhs.shape.rank, rb, rc)
    batched = bool(lb)
    left = _group(lhs, ([lb] if batched else []) + [lf, lc])
    right = _group(rhs, ([rb] if batched else []) + [rc, rf])
    dims = list(left.shape.dims[:-1]) + [right.shape.dims[-1]]
    product = new(Op.DOT, Shape.array(dot.shape.element_type, dims), [left, right],
                  dot_dnums=canonical_dnums(batched), precision_config=dot.attrs.precision_config)
    if product.shape.dims == dot.shape.dims:
        product.shape = dot.shape
        return product
    return new(Op.RESHAPE, dot.shape, [product])


@register_pass(aliases=("dot-decomposer",))
@dataclass
class DotCanonicalizer(Pass):
    """Rewrites every dot into the canonical batched matrix product [B,M,K] x [B,K,N] → [B,M,N].

    Assumes: a valid module. Guarantees: after the pass every dot has operands of rank 2 (no
    batch dimensions: lhs [M,K], rhs [K,N]) or rank 3 (one batch dimension first), contracting
    on lhs dimension -1 and rhs dimension -2; operand types, result type and precision config
    are unchanged; the transposes and reshapes that get there are explicit instructions.
    """

    name = "dot-canonicalizer"

    def run(self, module: Module) -> bool:
        return rewrite_module(module, DOT_RULES).changed
