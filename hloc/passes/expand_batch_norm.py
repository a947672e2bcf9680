"""Batch-norm expansion: batch-norm-training/-inference/-grad as reductions and elementwise ops.

The formulas are XLA's BatchNormExpander's (N = elements per feature, sums over every dimension
but the feature dimension, statistics broadcast back along it):
  training:  mean = Σx/N, var = Σx²/N - mean², y = (x - mean)·rsqrt(var + ε)·scale + offset
  inference: y = x·s + (offset - mean·s) with s = scale·rsqrt(var + ε)
  grad:      grad_offset = Σdy, grad_scale = Σ(dy·(x - mean))·rsqrt(var + ε),
             dx = scale·rsqrt(var + ε)/N · (N·dy - grad_offset - (x - mean)·Σ(dy·(x - mean))/(var + ε))
"""

from __future__ import annotations

from ..ir import Instruction, Module, Opcode
from ..util.record import dataclass
from .base import Pass, register_pass
from .expand_builder import Emit, scalar_adder
from .rewrite import P, RuleTable, rewrite_module

Op = Opcode
BATCH_NORM_RULES = RuleTable("batch-norm-expander")
_b = Emit()


class _Stats:
    """Per-feature helpers for one batch-norm instruction."""

    def __init__(self, instr: Instruction):
        x = instr.operands[0]
        self.x = x
        self.feature = instr.attrs.feature_index
        self.eps = instr.attrs.epsilon
        self.type = x.shape.element_type
        self.dims = x.shape.dims
        self.others = tuple(d for d in range(x.shape.rank) if d != self.feature)
        count = x.shape.num_elements // max(1, self.dims[self.feature]) if self.dims else 1
        self.count = max(1, count)
        self.adder = scalar_adder(instr.parent.parent, self.type)

    def spread(self, per_feature: Instruction) -> Instruction:
        """A per-feature vector broadcast to the operand's shape."""
        return _b.bcast(per_feature, self.dims, (self.feature,))

    def total(self, value: Instruction) -> Instruction:
        """Σ over every dimension but the feature one."""
        return _b.reduce(value, _b.scalar(0, self.type), self.others, self.adder)

    def constant(self, value: float, like: Instruction) -> Instruction:
        return _b.full(value, self.type, like.shape.dims)

    def rsqrt_var(self, var: Instruction) -> Instruction:
        return _b.unary(Op.RSQRT, _b.add(var, self.constant(self.eps, var)))


@BATCH_NORM_RULES.rule(P(Op.BATCH_NORM_TRAINING))
def expand_training(instr):
    """batch-norm-training → (normalized, mean, biased variance)."""
    s = _Stats(instr)
    x, scale, offset = instr.operands
    mean = _b.div(s.total(x), s.constant(s.count, scale))
    mean_sq = _b.div(s.total(_b.mul(x, x)), s.constant(s.count, scale))
    var = _b.sub(mean_sq, _b.mul(mean, mean))
    centered = _b.sub(x, s.spread(mean))
    normalized = _b.mul(centered, s.spread(s.rsqrt_var(var)))
    y = _b.add(_b.mul(normalized, s.spread(scale)), s.spread(offset))
    return _b.tuple([y, mean, var], instr.shape)


@BATCH_NORM_RULES.rule(P(Op.BATCH_NORM_INFERENCE))
def expand_inference(instr):
    """batch-norm-inference → x·s + (offset - mean·s), s = scale·rsqrt(var + ε)."""
    s = _Stats(instr)
    x, scale, offset, mean, var = instr.operands
    true_scale = _b.mul(scale, s.rsqrt_var(var))
    true_shift = _b.sub(offset, _b.mul(mean, true_scale))
    y = _b.add(_b.mul(x, s.spread(true_scale)), s.spread(true_shift))
    y.shape = instr.shape
    return y


@BATCH_NORM_RULES.rule(P(Op.BATCH_NORM_GRAD))
def expand_grad(instr):
    """batch-norm-grad → (grad_operand, grad_scale, grad_offset)."""
    s = _Stats(instr)
    x, scale, mean, var, dy = instr.operands
    rsqrt_var = s.rsqrt_var(var)
    centered = _b.sub(x, s.spread(mean))
    grad_offset = s.total(dy)
    sum_dy_centered = s.total(_b.mul(dy, centered))
    grad_scale = _b.mul(sum_dy_centered, rsqrt_var)
    n_dy = _b.mul(dy, s.constant(s.count, dy))
    correction = _b.mul(centered, s.spread(_b.div(sum_dy_centered,
                                                  _b.add(var, s.constant(s.eps, var)))))
    inner = _b.sub(_b.sub(n_dy, s.spread(grad_offset)), correction)
    factor = _b.div(_b.mul(scale, rsqrt_var), s.constant(s.count, scale))
    grad_x = _b.mul(s.spread(factor), inner)
    return _b.tuple([grad_x, grad_scale, grad_offset], instr.shape)


@register_pass
@dataclass
class BatchNormExpander(Pass):
    """Rewrites batch-norm-training, -inference and -grad into reduces and elementwise ops.

    Assumes: a valid module. Guarantees: no batch-norm op remains; statistics follow XLA's
    BatchNormExpander formulas (variance as E[x²] - E[x]², in the operand type), so results
    match XLA's rather than a two-pass f64 computation; a scalar add computation is added to
    the module for the reductions.
    """

    name = "batch-norm-expander"

    def run(self, module: Module) -> bool:
        return rewrite_module(module, BATCH_NORM_RULES).changed
