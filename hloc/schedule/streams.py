"""Stream assignment for multi-stream targets (CUDA): which top-level thunk runs on which
stream, and the events and waits that keep cross-stream dependencies safe.

Dependencies come from the slices thunks touch (their reads() and writes(), nested thunks
included), so they cover both dataflow (read after write) and memory reuse by the buffer
assignment (write after read, write after write).
A thunk continues the stream of a dependency that is still that stream's last thunk (no
event needed); otherwise it goes to the stream idle longest, up to `max_streams`. Each
cross-stream dependency gets an event recorded after the producer and a wait before the
consumer, unless the consumer's stream already waited for that point or a later one.
Nested sequences (while, conditional, call) run on their parent thunk's stream.
"""

from __future__ import annotations

from ..buffers.assignment import Slice
from ..thunks.base import Thunk, footprint
from ..thunks.thunks import StreamAssignment, ThunkProgram


def _overlap(a: Slice, b: Slice) -> bool:
    return a.offset < b.offset + b.size and b.offset < a.offset + a.size


def _covers(a: Slice, b: Slice) -> bool:
    return a.offset <= b.offset and b.offset + b.size <= a.offset + a.size


def dependencies(sequence: tuple[Thunk, ...]) -> list[set[int]]:
    """For each thunk, the earlier thunks it must wait for (through overlapping slices)."""
    # Per allocation, the recent writes and the reads since: a read conflicts with writes
    # only, a write with both. A write that covers an older access replaces it: later
    # conflicts with the older one reach it through the write.
    writes: dict[int, list[tuple[Slice, int]]] = {}
    reads: dict[int, list[tuple[Slice, int]]] = {}
    deps: list[set[int]] = []
    for i, thunk in enumerate(sequence):
        r, w = footprint(thunk)
        mine: set[int] = set()
        for s in r:
            mine.update(j for other, j in writes.get(s.allocation, ()) if _overlap(s, other))
        for s in w:
            for table in (writes, reads):
                mine.update(j for other, j in table.get(s.allocation, ()) if _overlap(s, other))
        for s in w:
            for table in (writes, reads):
                if s.allocation in table:
                    table[s.allocation] = [a for a in table[s.allocation] if not _covers(s, a[0])]
        for table, slices in ((reads, r), (writes, w)):
            for s in slices:
                if s.size:
                    table.setdefault(s.allocation, []).append((s, i))
        mine.discard(i)
        deps.append(mine)
    return deps


def assign_streams(program: ThunkProgram, max_streams: int = 4) -> StreamAssignment:
    """Streams, events and waits for the top-level thunks of `program`."""
    max_streams = max(1, max_streams)
    deps = dependencies(program.sequence)
    tail = [-1] * max_streams  # last thunk index on each stream
    streams: list[int] = []
    for i, mine in enumerate(deps):
        chained = [s for s in range(max_streams) if tail[s] in mine]
        stream = chained[0] if chained else min(range(max_streams), key=lambda s: (tail[s], s))
        streams.append(stream)
        tail[stream] = i
    events, waits = _synchronize(deps, streams, max_streams)
    used = max(streams) + 1 if streams else 1
    return StreamAssignment(used, tuple(streams), tuple(events), tuple(waits))


def _synchronize(deps, streams, max_streams):
    waited = [[-1] * max_streams for _ in range(max_streams)]  # [consumer][producer stream]
    event_of: dict[int, int] = {}
    events, waits = [], []
    for i, mine in enumerate(deps):
        s = streams[i]
        latest: dict[int, int] = {}
        for j in mine:
            t = streams[j]
            if t != s:
                latest[t] = max(latest.get(t, -1), j)
        for t, j in sorted(latest.items()):
            if waited[s][t] >= j:
                continue
            if j not in event_of:
                event_of[j] = len(events)
                events.append((event_of[j], t, j))
            waits.append((i, event_of[j]))
            waited[s][t] = j
    return events, waits
