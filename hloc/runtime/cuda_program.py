"""Executing a GPU program (hloc.thunks.gpu) on a device: the part of the CUDA
runtime that is the same for real GPUs and for the host emulator.

A device provides memory operations on slices (upload, download, copy, memset), kernel
launches and a synchronization point; this module walks the three programs: parameter
uploads (constants once per executable), the main thunks (streams serialized: the thunk
order already respects every dependency), and the result downloads. While loops copy
their predicate to the host after each condition run (or run a known trip count), and
conditionals copy their selector. HostCompute thunks run the reference implementation of
their instruction on downloaded operands. Gemm thunks with a BLAS descriptor go to the
runner's `blas` engine when the device set one up (HLOC_CUDA_GEMM=cublas).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from ..buffers.assignment import Slice
from ..errors import InputError
from ..ir import Module, Shape
from ..registry import Registry
from ..thunks.base import Thunk, ThunkKind
from ..thunks.gpu import GemmLaunch, GpuProgram, HostCompute, Launch
from ..thunks.thunks import Conditional, Copy, Memset, Sequential, While
from .executable import ProfileRow
from .layouts import memory_order


def to_device_bytes(array: np.ndarray, shape: Shape) -> bytes:
    """An array's elements in `shape`'s memory order, as the bytes kernels read."""
    arr = np.asarray(array).astype(shape.np_dtype, copy=False).reshape(shape.dims)
    return np.ascontiguousarray(np.transpose(arr, memory_order(shape))).tobytes()


def from_device_bytes(data: bytes, shape: Shape) -> np.ndarray:
    order = memory_order(shape)
    phys = np.frombuffer(data, dtype=shape.np_dtype).reshape([shape.dims[d] for d in order])
    return np.array(np.transpose(phys, np.argsort(order).astype(int)), order="C")


class GpuRunner:
    """Runs a GpuProgram on a device object."""

    def __init__(self, program: GpuProgram, module: Module, device, blas=None):
        self.program = program
        self.module = module
        self.device = device
        # `blas(call, name)` runs a Gemm thunk's BlasCall (cuBLAS or a host BLAS); None: every
        # Gemm thunk launches the GEMM kernel. `blas_calls` counts the thunks it ran.
        self.blas = blas
        self.blas_calls = 0
        self.instructions = {i.name: i for c in module.computations for i in c.instructions}
        self._constants_loaded = False
        self.rows: dict[str, ProfileRow] | None = None
        # `hook(thunk, run)` runs every thunk (it must call run() once): hloc.debug's
        # per-thunk tools; None (the default) costs one test per thunk.
        self.hook: Callable[[Thunk, Callable[[], None]], None] | None = None

    # ---- the three programs ----------------------------------------------------------------
    def run(self, args: Sequence[np.ndarray], profile: bool = False) -> list[np.ndarray]:
        entry = self.module.entry
        params = entry.parameters
        if len(args) != len(params):
            raise InputError(f"module {self.module.name} takes {len(params)} arguments, "
                             f"got {len(args)}")
        self.rows = {} if profile else None
        self.device.stream = 0
        self._upload(params, args)
        self.device.synchronize()
        self._run_main()
        self.device.synchronize()
        self.device.stream = 0
        return [from_device_bytes(self.device.download(d.slice), entry.root.shape.subshape(d.index))
                for d in self.program.device_to_host]

    def _upload(self, params, args) -> None:
        for u in self.program.host_to_device:
            if u.constant:
                if not self._constants_loaded:
                    instr = self.instructions[u.constant]
                    self.device.upload(u.slice, to_device_bytes(instr.literal.array, instr.shape))
                continue
            shape, value = params[u.number].shape, args[u.number]
            for i in u.index:
                shape, value = shape.tuple_shapes[i], value[i]
            self.device.upload(u.slice, to_device_bytes(value, shape))
        self._constants_loaded = True

    def _run_main(self) -> None:
        """Top-level thunks on their streams, with the assignment's events and waits."""
        streams = self.program.streams
        if streams is None:
            self.run_sequence(self.program.main)
            return
        waits: dict[int, list[int]] = {}
        for i, event in streams.waits:
            waits.setdefault(i, []).append(event)
        records = {j: (event, s) for event, s, j in streams.events}
        for i, thunk in enumerate(self.program.main):
            self.device.stream = streams.streams[i]
            for event in waits.get(i, ()):
                self.device.wait_event(event)
            self.run_sequence((thunk,))
            if i in records:
                self.device.record_event(records[i][0])

    # ---- thunks ------------------------------------------------------------------------------
    def run_sequence(self, thunks) -> None:
        for thunk in thunks:
            run = RUNNERS.lookup(thunk.kind)
            if self.hook is not None:
                self.hook(thunk, functools.partial(run, self, thunk))
                continue
            # Control flow is not timed itself: the thunks nested in it are.
            if self.rows is None or thunk.nested():
                run(self, thunk)
                continue
            self._record(thunk, self.device.timed(lambda t=thunk, run=run: run(self, t)))

    def _record(self, thunk, seconds: float) -> None:
        row = self.rows.get(thunk.name)
        if row is None:
            instr = self.instructions.get(thunk.name)
            ops = instr.opcode.value if instr is not None else ""
            if instr is not None and instr.called and instr.opcode.value == "fusion":
                ops = ",".join(i.opcode.value for i in instr.called[0].instructions
                               if i.opcode.value not in ("parameter", "tuple"))[:80]
            row = self.rows[thunk.name] = ProfileRow(thunk.name, thunk.kind, ops)
        row.count += 1
        row.seconds += seconds

    def scalar(self, s: Slice, shape: Shape):
        return from_device_bytes(self.device.download(s), shape).reshape(()).item()


Runner = Callable[[GpuRunner, Thunk], None]
RUNNERS: Registry[ThunkKind, Runner] = Registry("GPU thunk runner",
                                         modules=("hloc.runtime.cuda_collectives",))
runs = RUNNERS.register


@runs(ThunkKind.KERNEL)
def _launch(r: GpuRunner, t: Launch) -> None:
    r.device.launch(t)


@runs(ThunkKind.GEMM)
def _gemm(r: GpuRunner, t: GemmLaunch) -> None:
    if t.blas is None or r.blas is None:
        r.device.launch(t)
        return
    r.blas(t.blas, t.name)
    r.blas_calls += 1


@runs(ThunkKind.COPY)
def _copy(r: GpuRunner, t: Copy) -> None:
    r.device.copy(t.source, t.destination)


@runs(ThunkKind.MEMSET)
def _memset(r: GpuRunner, t: Memset) -> None:
    r.device.memset(t.destination, t.byte)


@runs(ThunkKind.WHILE)
def _while(r: GpuRunner, t: While) -> None:
    if t.trip_count is not None:
        for _ in range(t.trip_count):
            r.run_sequence(t.body)
        return
    pred = Shape.scalar("pred")
    while True:
        r.run_sequence(t.condition)
        if not r.scalar(t.predicate, pred):
            return
        r.run_sequence(t.body)


@runs(ThunkKind.CONDITIONAL)
def _conditional(r: GpuRunner, t: Conditional) -> None:
    instr = r.instructions[t.name]
    selector = r.scalar(t.selector, instr.operands[0].shape)
    if t.selector_is_pred:
        index = 0 if selector else 1
    else:
        index = int(selector)
        if index < 0 or index >= len(t.branches):
            index = len(t.branches) - 1
    r.run_sequence(t.branches[index])


@runs(ThunkKind.SEQUENTIAL)
def _sequential(r: GpuRunner, t: Sequential) -> None:
    r.run_sequence(t.thunks)


@runs(ThunkKind.HOST)
def _host(r: GpuRunner, t: HostCompute) -> None:
    from .interpreter import evaluate_computation, registry

    instr = r.instructions[t.name]
    pending = list(t.operands)
    operands = [_read_value(r, op.shape, pending) for op in instr.operands]
    result = registry.lookup(instr)(registry.Context(evaluate_computation), instr, operands)
    outs = list(t.outputs)
    _write_value(r, instr.shape, result, outs)


def _read_value(r: GpuRunner, shape: Shape, slices: list[Slice]):
    if shape.is_tuple:
        return tuple(_read_value(r, s, slices) for s in shape.tuple_shapes)
    if not shape.is_array:
        return None
    return from_device_bytes(r.device.download(slices.pop(0)), shape)


def _write_value(r: GpuRunner, shape: Shape, value, slices: list[Slice]) -> None:
    if shape.is_tuple:
        for s, v in zip(shape.tuple_shapes, value, strict=True):
            _write_value(r, s, v, slices)
        return
    if shape.is_array:
        r.device.upload(slices.pop(0), to_device_bytes(np.asarray(value), shape))


def profile_rows(runner: GpuRunner) -> list[ProfileRow]:
    return sorted((runner.rows or {}).values(), key=lambda row: -row.seconds)
