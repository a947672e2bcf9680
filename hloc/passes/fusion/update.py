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
"""

from __future__ import annotations

from ...analysis.sharing import can_share_operand, in_place_pairs, update_source
from ...ir import Computation, Instruction, Module, Opcode
from ...util.record import dataclass
from ..base import Pass, option, register_pass
from .build import as_fusion, fusion_size, merge_into_consumer, restore_orders
from .cluster import reads_slices
from .cost import can_root_fusion, depends_on, producer_class, program_computations

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
    a small dot's output fusion) or elementwise op with one output, read by the update alone
    (through reshapes), whose value other instructions also use, merges; it must not read
    the buffer being updated, and no other operand of the update may depend on it (no
    cycles); at most `max-ops` instructions per merged fusion.
    """

    name = "update-fusion"
    max_ops: int = option(256, minimum=1)
    dot_epilogues: int = option(0, minimum=0)

    def run(self, module: Module) -> bool:
        changed = [comp for comp in program_computations(module)
                   if _merge_updates(comp, self)]
        if changed:
            restore_orders(module, changed)
        return bool(changed)


def _in_place_update(consumer: Instruction) -> Instruction | None:
    """The dynamic-update-slice a kernel computes in place (a bare one, or a fusion's root on a
    parameter read by nothing else), or None."""
    if consumer.opcode == Op.DYNAMIC_UPDATE_SLICE:
        return consumer
    if consumer.opcode != Op.FUSION or consumer.attrs.fusion_kind != "kLoop":
        return None
    root = consumer.fused_computation().root
    if root.opcode != Op.DYNAMIC_UPDATE_SLICE or not in_place_pairs(consumer):
        return None  # the sharing analysis's rule: its target a parameter nothing else reads
    return root


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


def _producer(consumer: Instruction, dot_epilogues: int) -> Instruction | None:
    dus = _in_place_update(consumer)
    if dus is None:
        return None
    producer = _outside(consumer, update_source(dus.operands[1]))
    if producer is None or producer.parent is not consumer.parent:
        return None
    if producer.opcode == Op.FUSION:
        if not producer.shape.is_array or not (
                producer.attrs.fusion_kind == "kLoop"
                or _small_dot_epilogue(producer, dot_epilogues)):
            return None
    elif producer_class(producer) != "elementwise" or not can_root_fusion(producer):
        return None
    if producer.control_predecessors or producer.control_successors or \
            consumer.control_predecessors or consumer.control_successors:
        return None
    return producer


def _mergeable(consumer: Instruction, producer: Instruction, max_ops: int) -> bool:
    if consumer.operands.count(producer) != 1 or len(producer.users) < 2:
        return False  # a producer read only by the update: the fusion pass's to move
    if fusion_size(consumer) + fusion_size(producer) > max_ops:
        return False
    dus = _in_place_update(consumer)
    target = _outside(consumer, dus.operands[0])
    if target is None or target in producer.operands:
        return False  # the merged kernel would read the buffer it overwrites
    if _updates_state(producer):
        return False
    return not any(depends_on(o, producer) for o in consumer.operands if o is not producer)


def _updates_state(producer: Instruction) -> bool:
    """`producer` computes a new loop-carried value elementwise from the old one, whose buffer
    its kernel may then overwrite in place; a multi-output fusion's outputs share no
    operand's buffer, so merged, the loop would need a copy back into the state's buffer
    (a launch for a launch)."""
    return any(o.opcode == Op.GET_TUPLE_ELEMENT and o.operands[0].opcode == Op.PARAMETER
               and can_share_operand(producer, k) for k, o in enumerate(producer.operands))


def _merge_updates(comp: Computation, options: UpdateFusion) -> bool:
    changed = False
    for consumer in list(comp.instructions):
        if consumer.parent is not comp:
            continue  # merged away earlier in this sweep
        producer = _producer(consumer, options.dot_epilogues)
        if producer is None or not _mergeable(consumer, producer, options.max_ops):
            continue
        merge_into_consumer(comp, as_fusion(comp, producer), as_fusion(comp, consumer))
        changed = True
    return changed
