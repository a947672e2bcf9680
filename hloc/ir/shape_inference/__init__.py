"""Shape inference: the result shape every HLO opcode must have, per XLA's operation semantics.

`infer_shape(instr)` dispatches on the opcode through a registry (registry.SPECS) filled by
one module per op family (elementwise, shape_ops, reductions, contractions, gather_scatter,
control, leaves, collectives), imported on first use. Results carry no layout; compare them with `common.same` (layout- and
dynamism-insensitive, like XLA's ShapeUtil::Compatible).
"""

from .common import same
from .registry import OpSpec, infer_shape, registered_opcodes, spec_of

__all__ = ["OpSpec", "infer_shape", "registered_opcodes", "same", "spec_of"]
