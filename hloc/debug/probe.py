"""Running a bundle thunk by thunk with probes around every thunk: the base of `--localize`,
`--perturb`, `--trace` and `hloc extract`.

A *probe* is an object with `around(frame, run)` that must call `run()` (the thunk, nested
thunks included) exactly once; probes nest in the order given, the first outermost. A `Frame`
says which thunk runs, where (its parent frame, nesting depth) and how many times it ran
before (its iteration inside loops).

The runtimes expose one hook each, free when unused: the CPU runtime's step wrapper
(`CpuExecutable.run_wrapped`, the mechanism `--profile` uses) and the GPU runner's `hook`
(`CudaEmulatedExecutable.run_hooked`). `Instrumented` adapts both: it knows the program the
hook sees, the target-neutral thunks by name (a CUDA bundle carries thunks.json with the same
buffer assignment, so a GPU launch is checked through the slices of the thunk it implements)
and how to read a slice's bytes. Multi-device runtimes add one `Instrumented` per rank
(`rank` is its pid in traces and its key in reports).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

import numpy as np

from ..buffers.assignment import Slice
from ..errors import InputError
from ..ir import Module
from ..thunks.base import Thunk, walk
from ..util.record import dataclass

Runner = Callable[[], None]


class Stop(Exception):  # noqa: N818 - control flow, not an error
    """Raised by a probe to end the run early (e.g. once the first divergence is known)."""


@dataclass
class Frame:
    """One execution of a thunk."""

    thunk: Thunk
    parent: Frame | None
    depth: int
    iteration: int  # how many times this thunk ran before in this run
    order: int  # position of this execution among all thunk executions of the run

    def path(self) -> str:
        """The control-flow thunks around this one, outermost first, e.g. 'while.10[2]'."""
        parts, frame = [], self.parent
        while frame is not None:
            parts.append(f"{frame.thunk.name}[{frame.iteration}]")
            frame = frame.parent
        return "/".join(reversed(parts))


@dataclass
class Instrumented:
    """A loaded executable that can run with probes."""

    device: str
    module: Module
    sequence: tuple[Thunk, ...]  # the thunks the hook sees (GPU program for cuda)
    neutral: dict[str, Thunk]  # target-neutral leaf thunks by name
    raw: Callable[[Slice], np.ndarray]  # a writable uint8 view of a slice's bytes now
    _run: Callable[[list, Callable[[Thunk, Runner], None]], list[np.ndarray]]
    rank: int = 0
    by_name: dict[str, Thunk] = field(default_factory=dict)
    index_of: dict[str, int] = field(default_factory=dict)  # schedule position (thunk_list)

    def __post_init__(self) -> None:
        visits = list(walk(self.sequence))
        self.by_name = {v.thunk.name: v.thunk for v in visits}
        self.index_of = {v.thunk.name: i for i, v in reversed(list(enumerate(visits)))}

    def run(self, args: list, probes: list) -> list[np.ndarray]:
        """Run once on `args` with `probes` around every thunk; a Stop ends the run early
        (the outputs are then empty)."""
        frames: list[Frame | None] = [None]
        counts: dict[str, int] = {}
        order = [0]

        def hook(thunk: Thunk, run: Runner) -> None:
            parent = frames[-1]
            frame = Frame(thunk, parent, 0 if parent is None else parent.depth + 1,
                          counts.get(thunk.name, 0), order[0])
            counts[thunk.name] = frame.iteration + 1
            order[0] += 1
            frames.append(frame)
            try:
                _nest(probes, frame, run)()
            finally:
                frames.pop()
        try:
            return self._run(args, hook)
        except Stop:
            return []


def _nest(probes: list, frame: Frame, run: Runner) -> Runner:
    for probe in reversed(probes):
        run = _bound(probe, frame, run)
    return run


def _bound(probe, frame: Frame, run: Runner) -> Runner:
    return lambda: probe.around(frame, run)


def instrument(exe) -> Instrumented:
    """`exe` (from hloc.runtime.load) ready for probes: cpu and cuda-emulated devices."""
    from ..thunks.serialize import program_from_json

    if exe.device == "cpu":
        steps_of = {v.thunk.name: v.thunk for v in walk(exe.program.sequence)}

        def run_cpu(args, hook):
            def wrap(step, run):
                thunk = steps_of.get(step.name)
                return run if thunk is None else (lambda: hook(thunk, run))
            return exe.run_wrapped(args, wrap)
        return Instrumented("cpu", exe.module, exe.program.sequence, _leaves(exe.program.sequence),
                            exe.memory.slice_bytes, run_cpu)
    if exe.device == "cuda-emulated":
        neutral = program_from_json(bytes(exe.bundle.members["thunks.json"]))
        return Instrumented("cuda-emulated", exe.module, exe.program.main,
                            _leaves(neutral.sequence), exe.memory.view, exe.run_hooked)
    raise InputError(f"per-thunk tools (--localize, --perturb, --trace, extract) run on the cpu "
                     f"and cuda-emulated devices, not '{exe.device}'")


def _leaves(sequence) -> dict[str, Thunk]:
    return {v.thunk.name: v.thunk for v in walk(sequence) if not v.thunk.nested()}
