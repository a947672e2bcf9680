"""Consistency checks of buffer sharing: run on every assignment (cheap, O(n log n)).

Within one HloBuffer, values must follow each other: a value's last use comes no later than
the next value's definition, and may coincide with it only when the defining instruction
updates that value in place (or overwrites it elementwise). The results and parameters of
loop slots the body hands back unchanged are the same bytes as the slot's init value, so they
count as one value with it.
"""

from __future__ import annotations

from ..analysis import AliasAnalysis, HloBuffer, Liveness, can_share_operand, in_place_pairs, leaves
from ..analysis.storage import is_pass_through, while_init_leaf, while_of


class SharingError(RuntimeError):
    """Copy insertion or scheduling left a buffer whose values overlap: an internal error."""


def check_buffers(alias: AliasAnalysis, liveness: Liveness) -> None:
    for buf in alias.buffers:
        if len(buf.values) > 1:
            _check_sequence(alias, liveness, buf)


def _carrier(df, value):
    """The value whose bytes `value` merely passes along: a while result or parameter of a
    slot the body hands back unchanged carries its init value (recursively)."""
    while True:
        loop = while_of(df.call_graph, value)
        if loop is None or not is_pass_through(df, loop, value.index):
            return value
        value = while_init_leaf(df, loop, value.index)


def _ranges(alias: AliasAnalysis, liveness: Liveness, buf: HloBuffer) -> list[tuple[int, int, tuple]]:
    """(start, end, values) per group of values that are the same bytes: a value together
    with the untouched loop slots that carry it."""
    df = alias.dataflow
    groups: dict[int, list] = {}
    for v in buf.values:
        groups.setdefault(_carrier(df, v).id, []).append(v)
    out = [(min(liveness.value_start[v.id] for v in vs), max(liveness.value_end[v.id] for v in vs),
            tuple(vs)) for vs in groups.values()]
    return sorted(out, key=lambda r: (r[0], r[2][0].id))


def _check_sequence(alias: AliasAnalysis, liveness: Liveness, buf: HloBuffer) -> None:
    ranges = _ranges(alias, liveness, buf)
    _, end, last = ranges[0]
    for start, value_end, values in ranges[1:]:
        if end > start or (end == start and not _overwrites(alias, values[0], last)):
            raise SharingError(
                f"buffer {buf.id}: {last[0]} is live until tick {end} but {values[0]} is written "
                f"into the same storage at tick {start}")
        if value_end >= end:
            end, last = value_end, values


def _overwrites(alias: AliasAnalysis, new, olds) -> bool:
    """Whether new's defining instruction may read the old values while writing over them."""
    writer = new.instruction
    df = alias.dataflow
    in_place = {(k, idx) for _, k, idx in in_place_pairs(writer)}
    reads = [(k, idx) for k, op in enumerate(writer.operands)
             for idx, v in leaves(df.tree(op)) if any(v is o for o in olds)]
    if not reads:
        return False
    return all((k, idx) in in_place or (idx == () and can_share_operand(writer, k, new.index))
               for k, idx in reads)
