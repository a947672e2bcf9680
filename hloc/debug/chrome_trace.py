"""`hlo-run --trace FILE.json`: one run as a Chrome / Perfetto trace (JSON trace event format).

Every thunk execution is a complete event ("ph": "X") with `ts` and `dur` in microseconds
from the start of the run, on pid = rank (0 for one device) and tid = 0 (the runtimes run
streams in program order): control-flow thunks enclose the slices of the thunks nested in
them, so slices on a tid are properly nested and never partially overlap. `args` hold the
thunk kind, its HLO ops, bytes moved (sizes of the slices it reads and writes, nested thunks
included), estimated FLOPs (flops.py) and the achieved GB/s and GFLOP/s. Metadata events
("ph": "M") name the process ("rank N: DEVICE") and thread. A multi-device run adds one pid
per rank (collectives are thunks too, so they appear on every rank's track).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ..thunks.base import footprint
from .flops import instruction_flops
from .probe import Frame, Instrumented
from .thunk_list import hlo_ops


@dataclass
class Tracer:
    """The probe: times every thunk execution."""

    target: Instrumented
    events: list[dict] = field(default_factory=list)
    _start: int | None = None  # the first thunk's start: ts 0
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
        return self._info[name]

    def around(self, frame: Frame, run) -> None:
        begin = time.perf_counter_ns()
        if self._start is None:
            self._start = begin
        run()
        end = time.perf_counter_ns()
        info = self.info(frame)
        seconds = max((end - begin) * 1e-9, 1e-9)
        args = {**info, "iteration": frame.iteration,
                "GB/s": round(info["bytes"] / seconds / 1e9, 4)}
        if info["flops"] is not None:
            args["GFLOP/s"] = round(info["flops"] / seconds / 1e9, 4)
        self.events.append({"name": frame.thunk.name, "cat": info["kind"], "ph": "X",
                            "ts": (begin - self._start) / 1e3, "dur": (end - begin) / 1e3,
                            "pid": self.target.rank, "tid": 0, "args": args})

    def trace(self) -> dict:
        """The trace object: metadata, then slices by start time (parents before children)."""
        rank, device = self.target.rank, self.target.device
        meta = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                 "args": {"name": f"rank {rank}: {device}"}},
                {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
                 "args": {"sort_index": rank}},
                {"name": "thread_name", "ph": "M", "pid": rank, "tid": 0,
                 "args": {"name": "thunks"}}]
        slices = sorted(self.events, key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
        return {"traceEvents": meta + slices, "displayTimeUnit": "ms",
                "otherData": {"producer": "hlo-run --trace", "module": self.target.module.name}}


def write_trace(path: str, tracer: Tracer) -> None:
    from ..util.fs import atomic_write

    atomic_write(path, json.dumps(tracer.trace(), indent=0) + "\n")
