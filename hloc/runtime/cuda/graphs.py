"""CUDA graphs for a GPU program: which thunk sequences become one graph launch.

A graph is captured once per executable (the arena's addresses never change, so it stays
valid across runs and parameter uploads) and replayed with one launch, so a run costs one
host call per graph instead of one per kernel. What can be captured is device work alone:
kernels, GEMMs and convolutions (cuBLAS and cuDNN calls are captured too), device copies and
memsets, sequences of them, and control flow decided on the device:
- a while loop with a known trip count is unrolled into the graph while it stays under
  MAX_NODES;
- where the driver has conditional graph nodes (CUDA 12.8 and later; `conditional=True`),
  any other while loop becomes a WHILE node (its condition captured before it and at the end
  of its body, each time followed by a one-thread kernel that copies the predicate into the
  node's handle), and a conditional a SWITCH node (a kernel maps the selector to a branch
  index by XLA's rule), so the host reads nothing back.
Without conditional nodes, a loop the graph cannot unroll and a conditional end a graph, as
does a thunk that needs the host mid-program (a HostCompute, a collective, partition-id); the
thunks nested in them (a loop's condition and body, a branch) get graphs of their own,
launched once per iteration. HLOC_CUDA_GRAPHS=0 turns graphs off,
HLOC_CUDA_CONDITIONAL_NODES=0 conditional nodes alone; profiled and hooked runs never use
graphs (they time or wrap every thunk).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ...thunks.base import Thunk, ThunkKind
from ...thunks.thunks import Conditional, While
from ...util.env import flag
from ...util.record import dataclass

# Device operations of one graph at most (an unrolled loop's body counts once per trip).
MAX_NODES = 8192
# A sequence nested in host-driven control flow becomes a graph from this many operations.
MIN_NESTED_NODES = 2

_DEVICE_WORK = frozenset({ThunkKind.KERNEL, ThunkKind.GEMM, ThunkKind.CONVOLUTION, ThunkKind.COPY,
                          ThunkKind.MEMSET})


def graphs_enabled(env: Mapping[str, str] = os.environ) -> bool:
    return flag(env, "HLOC_CUDA_GRAPHS")


def conditional_nodes_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """HLOC_CUDA_CONDITIONAL_NODES (default 1): loops and conditionals as conditional nodes
    where the driver has them."""
    return flag(env, "HLOC_CUDA_CONDITIONAL_NODES")


def loop_plan(loop: While, conditional: bool = False) -> tuple[str | None, int]:
    """How a graph holds `loop` and the operations it takes: ("unroll", n) for a known trip
    count whose repeated body fits MAX_NODES, ("node", n) for a conditional WHILE node (the
    condition and the kernel that sets the node before it and again at the end of the body),
    (None, 0) where the host must drive it."""
    body = nodes(loop.body, conditional)
    if body is None:
        return None, 0
    if loop.trip_count is not None and body * loop.trip_count <= MAX_NODES:
        return "unroll", body * loop.trip_count
    condition = nodes(loop.condition, conditional) if conditional else None
    if condition is None:
        return None, 0
    return "node", 2 * (condition + 1) + body + 1


def nodes(thunks: Sequence[Thunk], conditional: bool = False) -> int | None:
    """Device operations `thunks` capture to (unrolled loops counted per trip, a conditional
    node with the kernels that set it), or None where one of them needs the host while it
    runs. `conditional`: the driver has conditional nodes."""
    total = 0
    for t in thunks:
        if t.kind in _DEVICE_WORK:
            inner: int | None = 1
        elif t.kind is ThunkKind.SEQUENTIAL:
            inner = nodes(t.nested()[0], conditional)
        elif isinstance(t, While):
            plan, count = loop_plan(t, conditional)
            inner = count if plan else None
        elif isinstance(t, Conditional) and conditional:
            branches = [nodes(b, conditional) for b in t.branches]
            # the kernel that sets the node, the node, the branches
            inner = None if None in branches else 2 + sum(b or 0 for b in branches)
        else:
            inner = None
        if inner is None:
            return None
        total += inner
        if total > MAX_NODES:
            return None
    return total


@dataclass(frozen=True)
class Segment:
    """Top-level thunks `start` to `stop` (exclusive): one graph, or run one by one."""

    start: int
    stop: int
    graph: bool


def segments(main: Sequence[Thunk], conditional: bool = False) -> list[Segment]:
    """The main program cut into maximal capturable runs (each under MAX_NODES) and the
    thunks between them."""
    out: list[Segment] = []
    start, count = 0, 0
    for i, t in enumerate(main):
        n = nodes((t,), conditional)
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


def describe(main: Sequence[Thunk], conditional: bool = False) -> list[str]:
    """One line per segment (what `hloc inspect` and the tests read)."""
    lines = []
    for s in segments(main, conditional):
        names = [t.name for t in main[s.start:s.stop]]
        what = f"graph of {nodes(main[s.start:s.stop], conditional)} operations" if s.graph else \
            f"{main[s.start].kind.value} (host-driven)"
        lines.append(f"{s.start}-{s.stop - 1}: {what}: {', '.join(names[:4])}"
                     + (" ..." if len(names) > 4 else ""))
    return lines
