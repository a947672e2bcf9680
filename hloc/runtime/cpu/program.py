"""Thunks → steps: everything a run needs is resolved once, when the bundle is loaded.

A `Step` is one thunk made ready: its `run` is a zero-argument callable whose arguments
(kernel pointer arrays, arena views, shapes) were computed at load time, so executing a
program is a loop of calls. Control-flow steps (while, conditional, sequential) have nested
step sequences and a `bind` that turns runners of those sequences into their own runner; the
same step tree is realized twice, plain and with a profiler wrapped around every step.

Builders are registered per thunk kind (`@builds(ThunkKind.GEMM)`) and get the `LoadContext`;
BUILDERS imports the modules that register them on first use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import field

import numpy as np

from ...ir import Instruction, Module, Opcode
from ...registry import Registry
from ...thunks.base import ThunkKind
from ...util.record import dataclass
from ..executable import ProfileRow
from .memory import Memory

Runner = Callable[[], None]


@dataclass(frozen=True)
class Step:
    """A thunk ready to run: `run` for leaves, `bind(child runners)` for control flow."""

    name: str
    kind: str
    ops: str
    run: Runner | None = None
    children: tuple[tuple[Step, ...], ...] = ()
    bind: Callable[[list[Runner]], Runner] | None = None


@dataclass
class LoadContext:
    """What step builders share: memory, the module's instructions, the loaded kernels."""

    memory: Memory
    module: Module
    kernels: dict  # kernels.json
    loaded: object  # kernels.LoadedKernels over the JIT-loaded object
    use_drivers: bool = True  # run native drivers (kernels.json "drivers") where planned
    instructions: dict[str, Instruction] = field(default_factory=dict)
    keep_alive: list = field(default_factory=list)  # ctypes arrays the steps point into
    _gemm_work: np.ndarray | None = None
    _conv_workspace: np.ndarray | None = None
    _conv_workspace_bytes: int = 0

    def __post_init__(self) -> None:
        self.instructions = {i.name: i for c in self.module.computations for i in c.instructions}
        self.drivers = {d["thunks"][0]: d for d in self.kernels.get("drivers", [])}

    def instruction(self, name: str) -> Instruction:
        return self.instructions[name]

    def reserve_conv_workspace(self, nbytes: int) -> None:
        """Ask for `nbytes` of conv_workspace (before the first run)."""
        self._conv_workspace_bytes = max(self._conv_workspace_bytes, nbytes)

    def conv_workspace(self) -> np.ndarray:
        """The bytes the native implicit-GEMM convolutions share (conv_native.py), allocated at
        the first call at the largest size reserved: like gemm_work's, its users never run at
        the same time."""
        if self._conv_workspace is None:
            from .memory import empty_aligned

            self._conv_workspace = empty_aligned(self._conv_workspace_bytes)
        return self._conv_workspace

    def own_bytes(self) -> int:
        """Bytes of the buffers the steps share besides the arena (conv_workspace, gemm_work)."""
        return sum(b.nbytes for b in (self._conv_workspace, self._gemm_work) if b is not None)

    def gemm_work(self) -> int:
        """The address of the packing buffer of the native products drivers run (one per
        executable: its runs, and the steps of a run, never overlap)."""
        if self._gemm_work is None:
            from .gemm import work_floats
            from .memory import empty_aligned

            self._gemm_work = empty_aligned(4 * work_floats())
        return self._gemm_work.ctypes.data

    def sequence(self, thunks) -> tuple[Step, ...]:
        """Steps for a thunk sequence; runs a native driver covers become one step."""
        from .kernels import build_driver_step

        thunks, steps, i = list(thunks), [], 0
        while i < len(thunks):
            driver = self.drivers.get(thunks[i].name) if self.use_drivers else None
            n = len(driver["thunks"]) if driver else 1
            step = None
            if driver and [t.name for t in thunks[i:i + n]] == driver["thunks"]:
                step = build_driver_step(self, driver, thunks[i:i + n])
            if step is not None:
                steps.append(step)
            else:
                steps.append(build_step(self, thunks[i]))
                n = 1
            i += n
        return tuple(steps)


Builder = Callable[[LoadContext, object], Step]
BUILDERS: Registry[ThunkKind, Builder] = Registry(
    "CPU thunk builder", modules=tuple(f"hloc.runtime.cpu.{m}" for m in (
        "collectives", "contract", "conv", "control", "host", "kernels")))
builds = BUILDERS.register


def build_step(ctx: LoadContext, thunk) -> Step:
    # kernels.json holds native code for Kernel thunks and for some others (native sorts):
    # those run as kernels whatever their kind.
    native = thunk.name in ctx.kernels.get("kernels", {})
    return BUILDERS.lookup(ThunkKind.KERNEL if native else thunk.kind)(ctx, thunk)


def op_names(ctx: LoadContext, name: str) -> str:
    """The HLO ops a thunk executes: the instruction, and a fusion's fused opcodes."""
    instr = ctx.instructions.get(name)
    if instr is None or instr.opcode != Opcode.FUSION:
        return name
    ops = sorted({i.opcode.value for i in instr.called[0].instructions
                  if i.opcode not in (Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE)})
    return f"{name} ({', '.join(ops)})"


# ---- realizing step trees -----------------------------------------------------------------

def _nothing() -> None:
    return None


def realize(steps: tuple[Step, ...], wrap=None) -> Runner:
    """One runner for a step sequence; `wrap(step, runner)` decorates every step's runner."""
    runs = [_realize_one(s, wrap) for s in steps]
    if not runs:
        return _nothing
    if len(runs) == 1:
        return runs[0]

    def run_all() -> None:
        for run in runs:
            run()
    return run_all


def _realize_one(step: Step, wrap) -> Runner:
    if step.bind is not None:
        run = step.bind([realize(c, wrap) for c in step.children])
    else:
        run = step.run or _nothing
    return wrap(step, run) if wrap is not None else run


class Profiler:
    """Times every step; a control-flow step's row excludes its nested steps' time."""

    def __init__(self):
        self.rows: dict[str, ProfileRow] = {}
        self._child = [0.0]

    def wrap(self, step: Step, run: Runner) -> Runner:
        row = self.rows.setdefault(step.name, ProfileRow(step.name, step.kind, step.ops))
        child = self._child
        clock = time.perf_counter

        def timed() -> None:
            child.append(0.0)
            start = clock()
            run()
            spent = clock() - start
            row.count += 1
            row.seconds += spent - child.pop()
            child[-1] += spent
        return timed

    def reset(self) -> None:
        for row in self.rows.values():
            row.count, row.seconds = 0, 0.0
        self._child[:] = [0.0]
