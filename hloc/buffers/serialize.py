"""Bundle forms of a buffer assignment: XLA's BufferAssignmentProto (built by the frontend,
the only place touching protobuf classes) and a readable text report."""

from __future__ import annotations

from .assignment import BufferAssignment


def assignment_to_proto_bytes(assignment: BufferAssignment) -> bytes:
    from ..frontend.buffer_proto import buffer_assignment_to_bytes

    return buffer_assignment_to_bytes(assignment)


def _value_name(v) -> str:
    idx = "{" + ",".join(map(str, v.index)) + "}" if v.index else ""
    return f"%{v.instruction.name}{idx}"


def assignment_to_text(assignment: BufferAssignment) -> str:
    """Per allocation: size, flags and every value with its offset and live range; then the
    temp heap's size against its lower bound (the most bytes live at one tick)."""
    stats = assignment.stats()
    df = assignment.dataflow
    live = assignment.liveness
    lines = [f"buffer assignment for module {assignment.module.name}",
             f"timeline: {live.timeline.length} ticks, {len(df.values)} values, "
             f"{len(assignment.alias.buffers)} buffers, {len(assignment.allocations)} allocations",
             "memory: " + " ".join(f"{k}={v}" for k, v in stats.as_dict().items()),
             f"temp heap: {assignment.heap.size} bytes ({assignment.heap.strategy}-ordered best fit), "
             f"lower bound {assignment.temp_lower_bound} bytes",
             f"peak memory (arguments + constants + outputs + temp): "
             f"{stats.argument_bytes + stats.constant_bytes + _non_param_outputs(assignment) + stats.temp_bytes} bytes",
             ""]
    ticks = {i.name: t for i, t in live.timeline.start.items()}
    for a in assignment.allocations:
        lines.append(_allocation_header(a))
        for value_id, offset, size in sorted(a.assigned, key=lambda t: (t[1], live.value_start[t[0]])):
            v = df.values[value_id]
            lines.append(f"  value {v.id} {_value_name(v)} {v.shape} offset {offset} size {size} "
                         f"live [{live.value_start[v.id]}, {live.value_end[v.id]}]")
        for name, s in sorted(assignment.scratch.items(), key=lambda kv: kv[1].offset):
            if s.allocation == a.index:
                lines.append(f"  scratch of %{name} offset {s.offset} size {s.size} "
                             f"live [{ticks[name]}, {ticks[name]}]")
    return "\n".join(lines) + "\n"


def _non_param_outputs(assignment: BufferAssignment) -> int:
    return sum(a.size for a in assignment.allocations if a.kind == "output")


def _allocation_header(a) -> str:
    flags = [a.kind]
    if a.kind == "parameter":
        flags.append(f"parameter {a.parameter_number}{list(a.parameter_index) if a.parameter_index else ''}")
    if a.kind == "constant":
        flags.append(f"constant %{a.constant}")
    if a.maybe_live_out:
        flags.append("maybe-live-out")
    if a.aliased_with_output:
        flags.append("aliased-with-output")
    return f"allocation {a.index}: {a.size} bytes, " + ", ".join(flags)
