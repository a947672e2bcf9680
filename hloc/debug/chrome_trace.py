"""`hlo-run --trace FILE.json`: one run as a Chrome / Perfetto trace (JSON trace event format).

Every thunk execution is a complete event ("ph": "X") with `ts` and `dur` in microseconds
from the start of the run, on pid = rank (0 for one device) and tid = 0 (the runtimes run
streams in program order): control-flow thunks enclose the slices of the thunks nested in
them, so slices on a tid are properly nested and never partially overlap. `args` hold the
thunk kind, its HLO ops, bytes moved (sizes of the slices it reads and writes, nested thunks
included), estimated FLOPs (flops.py) and the achieved GB/s and GFLOP/s. Metadata events
("ph": "M") name the process ("rank N: DEVICE") and thread. A multi-device run adds one pid
per rank (collectives are thunks too, so they appear on every rank's track, their `args`
naming the `collective` op; `bytes` is what they read and write: the bytes moved).
"""

from __future__ import annotations

import json
import time
from dataclasses import field

from ..thunks.base import footprint
from ..thunks.collectives import Collective
from ..util.record import dataclass
from .flops import instruction_flops
from .probe import Frame, Instrumented
from .thunk_list import hlo_ops


@dataclass
class Tracer:
    """The probe: times every thunk execution."""

    target: Instrumented
    events: list[dict] = field(default_factory=list)
    start: int | None = None  # perf_counter_ns at ts 0 (default: the first thunk's start)
    _info: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        mod = self.target.module
        self._instructions = {i.name: i for c in mod.computations for i in c.instructions}

    def info(self, frame: Frame) -> dict:
        name = frame.thunk.name
        if name not in self._info:
            reads, writes = footprint(frame.thunk)
            instr = self._instructions.get(name)
            flops = None
            if instr is not None and not frame.thunk.nested():
                flops = instruction_flops(instr)
            self._info[name] = {"kind": str(frame.thunk.kind), "hlo": hlo_ops(instr),
                                "bytes": sum(s.size for s in (*reads, *writes)), "flops": flops}
            if isinstance(frame.thunk, Collective):  # bytes moved: sent + received
                self._info[name]["collective"] = frame.thunk.op
        return self._info[name]

    def around(self, frame: Frame, run) -> None:
        begin = time.perf_counter_ns()
        if self.start is None:
            self.start = begin
        run()
        end = time.perf_counter_ns()
        info = self.info(frame)
        seconds = max((end - begin) * 1e-9, 1e-9)
        args = {**info, "iteration": frame.iteration,
                "GB/s": round(info["bytes"] / seconds / 1e9, 4)}
        if info["flops"] is not None:
            args["GFLOP/s"] = round(info["flops"] / seconds / 1e9, 4)
        self.events.append({"name": frame.thunk.name, "cat": info["kind"], "ph": "X",
                            "ts": (begin - self.start) / 1e3, "dur": (end - begin) / 1e3,
                            "pid": self.target.rank, "tid": 0, "args": args})

    def part(self) -> dict:
        """This rank's share of a trace (picklable: gathered from MPI ranks to rank 0)."""
        return {"rank": self.target.rank, "device": self.target.device,
                "module": self.target.module.name, "events": self.events}

    def trace(self) -> dict:
        """The trace object: metadata, then slices by start time (parents before children)."""
        return trace_of([self.part()])


def trace_of(parts: list[dict]) -> dict:
    """One trace of every rank's part: per rank (pid) its metadata, then all slices by pid
    and start time."""
    meta = []
    for p in sorted(parts, key=lambda p: p["rank"]):
        rank = p["rank"]
        meta += [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                  "args": {"name": f"rank {rank}: {p['device']}"}},
                 {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
                  "args": {"sort_index": rank}},
                 {"name": "thread_name", "ph": "M", "pid": rank, "tid": 0,
                  "args": {"name": "thunks"}}]
    events = [e for p in parts for e in p["events"]]
    slices = sorted(events, key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    return {"traceEvents": meta + slices, "displayTimeUnit": "ms",
            "otherData": {"producer": "hlo-run --trace", "module": parts[0]["module"]}}


def write_trace(path: str, tracer: Tracer) -> None:
    write_parts(path, [tracer.part()])


def write_parts(path: str, parts: list[dict]) -> None:
    """Write the trace of `parts` (trace_of) to `path`."""
    from ..util.fs import atomic_write

    atomic_write(path, json.dumps(trace_of(parts), indent=0) + "\n")
