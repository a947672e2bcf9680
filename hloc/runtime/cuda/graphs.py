"""CUDA graphs for a GPU program: which thunk sequences become one graph launch.

A graph is captured once per executable (the arena's addresses never change, so it stays
valid across runs and parameter uploads) and replayed with one launch, so a run costs one
host call per graph instead of one per kernel. What can be captured is device work alone:
kernels, GEMMs and convolutions (cuBLAS and cuDNN calls are captured too), device copies and memsets, sequences of
them, and while loops with a known trip count, unrolled into the graph while the graph stays
under MAX_NODES. A thunk that needs the host mid-program (a while loop's predicate read
back, a conditional's selector, a HostCompute, a collective, partition-id) ends a graph;
the thunks nested in it (a loop's condition and body) get graphs of their own, launched
once per iteration. HLOC_CUDA_GRAPHS=0 turns graphs off; profiled and hooked runs never use
them (they time or wrap every thunk).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ...thunks.base import Thunk, ThunkKind
from ...thunks.thunks import While
from ...util.record import dataclass

# Device operations of one graph at most (an unrolled loop's body counts once per trip).
MAX_NODES = 8192
# A sequence nested in host-driven control flow becomes a graph from this many operations.
MIN_NESTED_NODES = 2

_DEVICE_WORK = frozenset({ThunkKind.KERNEL, ThunkKind.GEMM, ThunkKind.CONVOLUTION, ThunkKind.COPY,
                          ThunkKind.MEMSET})


def graphs_enabled(env: Mapping[str, str] = os.environ) -> bool:
    value = env.get("HLOC_CUDA_GRAPHS", "1").strip()
    if value not in ("0", "1"):
        from ...errors import InputError

        raise InputError(f"HLOC_CUDA_GRAPHS={value!r}: expected 0 or 1")
    return value == "1"


def nodes(thunks: Sequence[Thunk]) -> int | None:
    """Device operations `thunks` capture to (loops unrolled), or None where one of them needs
    the host while it runs."""
    total = 0
    for t in thunks:
        if t.kind in _DEVICE_WORK:
            total += 1
        elif t.kind is ThunkKind.SEQUENTIAL:
            inner = nodes(t.nested()[0])
            if inner is None:
                return None
            total += inner
        elif isinstance(t, While) and t.trip_count is not None:
            inner = nodes(t.body)
            if inner is None:
                return None
            total += inner * t.trip_count
        else:
            return None
        if total > MAX_NODES:
            return None
    return total


@dataclass(frozen=True)
class Segment:
    """Top-level thunks `start` to `stop` (exclusive): one graph, or run one by one."""

    start: int
    stop: int
    graph: bool


def segments(main: Sequence[Thunk]) -> list[Segment]:
    """The main program cut into maximal capturable runs (each under MAX_NODES) and the
    thunks between them."""
    out: list[Segment] = []
    start, count = 0, 0
    for i, t in enumerate(main):
        n = nodes((t,))
        if n is None or n == 0:
            if count:
                out.append(Segment(start, i, True))
            out.append(Segment(i, i + 1, False))
            start, count = i + 1, 0
            continue
        if count and count + n > MAX_NODES:
            out.append(Segment(start, i, True))
            start, count = i, 0
        count += n
    if count:
        out.append(Segment(start, len(main), True))
    return out


def describe(main: Sequence[Thunk]) -> list[str]:
    """One line per segment (what `hloc inspect` and the tests read)."""
    lines = []
    for s in segments(main):
        names = [t.name for t in main[s.start:s.stop]]
        what = f"graph of {nodes(main[s.start:s.stop])} operations" if s.graph else \
            f"{main[s.start].kind.value} (host-driven)"
        lines.append(f"{s.start}-{s.stop - 1}: {what}: {', '.join(names[:4])}"
                     + (" ..." if len(names) > 4 else ""))
    return lines
