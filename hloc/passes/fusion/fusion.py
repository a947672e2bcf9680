"""Instruction fusion: loop fusion, input (reduction) fusion and output (dot epilogue) fusion.

Consumers are visited users-first; each grows a cluster of producers (fusion_cluster.py decides
who joins, using the cost model in fusion_cost.py) which becomes one fusion instruction
(fusion_build.py). A fusion's kind follows what it holds: kInput when the root is a reduce,
kOutput when a dot or convolution sits under its elementwise epilogue, kLoop otherwise.
"""

from __future__ import annotations

from ...ir import Computation, Module, Opcode
from ...util.record import dataclass
from ..base import Pass, option, register_pass
from .build import fuse_cluster, fuse_each
from .cluster import FusionLimits, grow, reads_slices
from .cost import can_root_fusion


@register_pass(aliases=("instruction-fusion",))
@dataclass
class FusionPass(Pass):
    """Fuses producers into their consumers so one kernel computes a whole cluster.

    Fuses elementwise ops, index-remapping ops (broadcast, reshape, transpose, slice, pad,
    concatenate, iota, reverse, dynamic-slice, gather) and scalar constants into consumers;
    reduce roots absorb their input chains (kInput); a dynamic-update-slice root absorbs the
    producers of its update and start indices, never the buffer it updates in place nor
    what reads that buffer; with `output`, a dot or convolution joins the elementwise
    epilogue that alone reads it (kOutput); with `reduce-epilogue`, a reduce joins the
    elementwise op that alone reads it (XLA CPU style).

    With `dot-slices` N > 0, a dot of at most N multiply-adds takes in a dynamic-slice operand
    that only it reads (the CUDA pipelines: a loop step's slice of its input sequence then
    costs no kernel of its own); the dot becomes a kOutput fusion if nothing else joins.

    Producers whose other users stay outside are duplicated only when cheap, when the copy
    drags at most `duplicate` instructions along (0: never duplicate), and not when the
    producer gets a buffer anyway (a root, or read by a tuple, a dot, ...) while reading more
    bytes than it writes: consumers then read its buffer.

    No producer joins where the kernel would emit it more than `emissions` times (XLA's
    code-duplication limit, FusionNodeIndexingEvaluation's 15): an element read at several
    indices is computed at each, and chains of slices and pads (an associative scan's
    levels) would otherwise double its code at every level. Broadcasts and constants are
    exempt (their operands are counted instead); what is refused is stored once and read.

    Assumes: a valid module (layouts need not be assigned). Guarantees: the module computes the
    same values; expensive producers (transcendentals, divides, reductions, dots) are never
    duplicated nor fused below an op that reads an element several times; at most `max-ops`
    instructions per fusion; nothing with side effects, control dependencies or called
    control flow is fused; only program computations (entry, loop bodies, branches) change.
    """

    name = "fusion"
    max_ops: int = option(256, minimum=1)
    output: bool = True
    reduce_epilogue: bool = True
    duplicate: int = option(4, minimum=0)
    dot_slices: int = option(0, minimum=0)
    emissions: int = option(15, minimum=1)

    def run(self, module: Module) -> bool:
        return fuse_each(module, lambda comp: _fuse_computation(comp, self))


def _fuse_computation(comp: Computation, limits: FusionLimits) -> bool:
    changed = False
    order = comp.post_order()
    position = {id(instr): n for n, instr in enumerate(order)}
    for root in reversed(order):
        if root.parent is not comp or root.opcode == Opcode.FUSION:
            continue
        if not can_root_fusion(root) and not reads_slices(root, limits.dot_slices):
            continue
        cluster = grow(root, limits, position)
        if cluster.real_members() == 0:
            continue
        fuse_cluster(comp, root, cluster.members)
        changed = True
    return changed
