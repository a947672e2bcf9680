"""Update fusion: an in-place dynamic-update-slice's kernel also computes its update.

A loop step typically computes a value (an RNN's new hidden state) that it both carries to
the next step and writes into a row of a sequence buffer (a dynamic-update-slice). The value
has users besides the update, so the fusion pass cannot move it into the update's kernel,
and being expensive it is not duplicated: the step launches one kernel to compute it and
another to copy it into the row. This pass makes the two one multi-output fusion (XLA's
in-place update kernels write dynamic-update-slices only). The merged kernel walks the
update's elements once: each element of the
producer's value is computed, stored to the producer's own output and stored into the
updated buffer (the backends map one index onto the other through the reshapes between).

The kernel's other operands of that value's shape merge the same way when it reads them at
the update's index only (an LSTM's new cell state, from which the new hidden state is
computed): the pass computes them too (sharing.in_update_pass), and a new loop state among
them still overwrites the old one (sharing.can_share_operand).
"""

from __future__ import annotations

from ...analysis.sharing import (
    aligned_uses,
    can_share_operand,
    elementwise_of,
    in_place_update,
    update_source,
)
from ...ir import Computation, Instruction, Module, Opcode, Shape
from ...util.record import dataclass
from ..base import Pass, option, register_pass
from .build import as_fusion, fuse_each, fusion_size, merge_into_consumer
from .cluster import reads_slices
from .cost import can_root_fusion, depends_on, producer_class

Op = Opcode


@register_pass
@dataclass
class UpdateFusion(Pass):
    """Merges the producer of an in-place dynamic-update-slice's update into the update's
    kernel, which then also writes the producer's value (a multi-output fusion).

    With `dot-epilogues` N > 0, a dot's epilogue (a kOutput fusion whose dot has at most N
    multiply-adds) merges too: the CUDA pipelines, whose GEMM kernel then stores each
    element of its value into the updated buffer as well (the CPU's dot kernels would
    compute the update's elements again).

    Assumes: a valid module, after `fusion` (whose dynamic-update-slice fusions hold their
    update's reshapes). Guarantees: same values; only a loop fusion (or, with `dot-epilogues`,
    a small dot's output fusion) or elementwise op with one output merges, whose value other
    instructions also use, and which the update reads alone (through reshapes) or the
    update's kernel reads at the update's index only (a loop fusion or elementwise op of the
    update's source's dims); it must not read the buffer being updated, no other operand of
    the update's kernel may depend on it (no cycles), and a loop state it may overwrite in
    place stays so; at most `max-ops` instructions per merged fusion.
    """

    name = "update-fusion"
    max_ops: int = option(256, minimum=1)
    dot_epilogues: int = option(0, minimum=0)

    def run(self, module: Module) -> bool:
        return fuse_each(module, lambda comp: _merge_updates(comp, self))


def _in_place_update(consumer: Instruction) -> Instruction | None:
    """The dynamic-update-slice a kernel computes in place (a bare one, or a fusion's root
    value on a parameter read by nothing else: the sharing analysis's rule), or None."""
    if consumer.opcode == Op.DYNAMIC_UPDATE_SLICE:
        return consumer
    if consumer.opcode != Op.FUSION or consumer.attrs.fusion_kind != "kLoop":
        return None
    return in_place_update(consumer.fused_computation())


def _outside(consumer: Instruction, inner: Instruction) -> Instruction | None:
    """The operand of `consumer` that `inner` (its fused parameter, or itself) stands for."""
    if consumer.opcode != Op.FUSION:
        return inner
    if inner.opcode != Op.PARAMETER or len(inner.users) != 1:
        return None
    return consumer.operands[inner.attrs.parameter_number]


def _small_dot_epilogue(fusion: Instruction, limit: int) -> bool:
    """A kOutput fusion of one dot of at most `limit` multiply-adds under its epilogue."""
    cores = [i for i in fusion.fused_computation().instructions
             if i.opcode in (Op.DOT, Op.CONVOLUTION)]
    return fusion.attrs.fusion_kind == "kOutput" and len(cores) == 1 and \
        reads_slices(cores[0], limit)


def _producers(consumer: Instruction, dot_epilogues: int) -> list[Instruction]:
    """What may merge into `consumer`, an in-place update's kernel: the producer of the value
    the update copies, then the consumer's operands that the merged kernel would compute in
    its pass over the update's elements (`sharing.in_update_pass`: elementwise values of the
    update source's dims, read in the consumer at that index only)."""
    dus = _in_place_update(consumer)
    if dus is None or consumer.control_predecessors or consumer.control_successors:
        return []
    source = update_source(dus.operands[1])
    out = []
    copied = _outside(consumer, source)
    if copied is not None and _fusible(copied, dot_epilogues):
        out.append(copied)
    if consumer.opcode == Op.FUSION:
        for param in consumer.fused_computation().parameters:
            producer = consumer.operands[param.attrs.parameter_number]
            if producer is not copied and _fusible(producer, 0) and \
                    _computed_in_pass(producer, source.shape) and \
                    aligned_uses(param, source.shape, dus):
                out.append(producer)
    return [p for p in out if p.parent is consumer.parent]


def _fusible(producer: Instruction, dot_epilogues: int) -> bool:
    """A loop fusion with one output (or, with `dot-epilogues`, a small dot's output fusion),
    or an elementwise op that can root a fusion; no control edges."""
    if producer.control_predecessors or producer.control_successors:
        return False
    if producer.opcode == Op.FUSION:
        return producer.shape.is_array and (producer.attrs.fusion_kind == "kLoop"
                                            or _small_dot_epilogue(producer, dot_epilogues))
    return producer_class(producer) == "elementwise" and can_root_fusion(producer)


def _computed_in_pass(producer: Instruction, shape: Shape) -> bool:
    """`producer`'s value, merged, is elementwise of `shape`'s dims (in_update_pass)."""
    value = producer.fused_computation().root if producer.opcode == Op.FUSION else producer
    return elementwise_of(value, shape)


def _mergeable(consumer: Instruction, producer: Instruction, max_ops: int) -> bool:
    if consumer.operands.count(producer) != 1 or len(producer.users) < 2:
        return False  # a producer read only by the update: the fusion pass's to move
    if fusion_size(consumer) + fusion_size(producer) > max_ops:
        return False
    dus = _in_place_update(consumer)
    target = _outside(consumer, dus.operands[0])
    if target is None or target in producer.operands:
        return False  # the merged kernel would read the buffer it overwrites
    if not _keeps_state(consumer, producer, update_source(dus.operands[1]).shape):
        return False
    return not any(depends_on(o, producer) for o in consumer.operands if o is not producer)


def _keeps_state(consumer: Instruction, producer: Instruction, shape: Shape) -> bool:
    """Merged, every loop-carried value `producer` may overwrite in place (its kernel computes
    the new value elementwise from the old) stays so: the merged kernel reads the old value
    at each index of its pass over the update only (sharing's update-pass rule). Else the
    loop would need a copy back into the state's buffer: a launch for a launch."""
    for k, o in enumerate(producer.operands):
        if o.opcode != Op.GET_TUPLE_ELEMENT or o.operands[0].opcode != Op.PARAMETER or \
                not can_share_operand(producer, k):
            continue
        if o in consumer.operands or not _computed_in_pass(producer, shape):
            return False
        if producer.opcode == Op.FUSION:
            if not aligned_uses(producer.fused_computation().parameter(k), shape):
                return False
    return True


def _merge_updates(comp: Computation, options: UpdateFusion) -> bool:
    changed = False
    for consumer in list(comp.instructions):
        if consumer.parent is not comp:
            continue  # merged away earlier in this sweep
        while True:  # the merged kernel may take the next producer too
            producer = next((p for p in _producers(consumer, options.dot_epilogues)
                             if _mergeable(consumer, p, options.max_ops)), None)
            if producer is None:
                break
            consumer = merge_into_consumer(comp, as_fusion(comp, producer),
                                           as_fusion(comp, consumer))
            changed = True
    return changed
