"""hloc.buffers.BufferAssignment -> XLA's BufferAssignmentProto (bundle member buffer_assignment.pb).

Logical buffers are hloc's HloValues (id, size, defining instruction id and shape index);
allocations carry XLA's flags; buffer_aliases list every other position where a value is
visible (tuple elements, get-tuple-element, bitcast, call results, forwarded parameters);
one heap-simulator trace records the temp allocation's packing in timeline order.
"""

from __future__ import annotations

from .gen import hlo_pb2

_ALLOC, _FREE, _SHARE = 0, 1, 2


def buffer_assignment_to_proto(assignment) -> hlo_pb2.BufferAssignmentProto:
    """The BufferAssignmentProto of an hloc BufferAssignment."""
    pb = hlo_pb2.BufferAssignmentProto()
    df = assignment.dataflow
    for v in df.values:
        lb = pb.logical_buffers.add(id=v.id, size=v.size, color=0)
        lb.defined_at.instruction_id = v.instruction.id
        lb.defined_at.shape_index.extend(v.index)
    _aliases(assignment, pb)
    for a in assignment.allocations:
        _allocation(a, pb.buffer_allocations.add())
    _trace(assignment, pb.heap_simulator_traces.add())
    return pb


def buffer_assignment_to_bytes(assignment) -> bytes:
    return buffer_assignment_to_proto(assignment).SerializeToString(deterministic=True)


def _aliases(assignment, pb) -> None:
    df = assignment.dataflow
    for comp in df.call_graph.sequential:
        for instr in comp.instructions:
            for index, v in df.leaves_of(instr):
                if v.instruction is instr and v.index == index:
                    continue
                alias = pb.buffer_aliases.add(source_buffer_id=v.id)
                alias.location.instruction_id = instr.id
                alias.location.shape_index.extend(index)


def _allocation(a, out) -> None:
    out.index = a.index
    out.size = a.size
    out.is_thread_local = False
    out.is_entry_computation_parameter = a.kind == "parameter"
    if a.kind == "parameter":
        out.parameter_number = a.parameter_number
        out.parameter_shape_index.extend(a.parameter_index)
    out.maybe_live_out = a.maybe_live_out
    out.is_constant = a.kind == "constant"
    out.is_tuple = False
    out.is_parameter_aliased_with_output = a.aliased_with_output
    for value_id, offset, size in a.assigned:
        out.assigned.add(logical_buffer_id=value_id, offset=offset, size=size)


def _trace(assignment, trace) -> None:
    temp = assignment.temp_allocation
    trace.whole_module_simulation = True
    if temp is None:
        return
    trace.buffer_allocation_index = temp.index
    live = assignment.liveness
    alias = assignment.alias
    events = []
    for bids in assignment.units.values():
        canonical = alias.buffers[bids[0]].values[0].id
        for b in bids:
            for v in alias.buffers[b].values:
                kind = _ALLOC if v.id == canonical else _SHARE
                events.append((live.value_start[v.id], 0, v.id, kind, canonical, v))
                events.append((live.value_end[v.id], 1, v.id, _FREE, 0, v))
    for _, _, _, kind, canonical, v in sorted(events, key=lambda e: e[:3]):
        ev = trace.events.add(kind=kind, buffer_id=v.id,
                              computation_name=v.instruction.parent.name,
                              instruction_name=v.instruction.name)
        if kind == _SHARE:
            ev.share_with_canonical_id = canonical
