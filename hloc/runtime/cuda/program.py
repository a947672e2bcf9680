"""Executing a GPU program (hloc.thunks.gpu) on a device: the part of the CUDA
runtime that is the same for real GPUs and for the host emulator.

A device provides memory operations on slices (upload, download, copy, memset), batched
parameter uploads and result downloads (`upload_arrays`, `download_arrays`: pinned staging
on a copy stream on a GPU), kernel launches and a synchronization point; this module walks
the three programs: parameter uploads (constants once per executable, resident parameters
only when they change: hloc.runtime.cuda.residency), the main thunks (streams serialized: the
thunk order already respects every dependency), and the result downloads. Profiled runs
time the uploads and downloads as rows of their own, with their bytes. While loops copy
their predicate to the host after each condition run (or run a known trip count), and
conditionals copy their selector. HostCompute thunks run the reference implementation of
their instruction on downloaded operands. Gemm thunks with a BLAS descriptor go to the
runner's `blas` engine when the device set one up (HLOC_CUDA_GEMM), convolution thunks with
a cuDNN descriptor to its `dnn` engine when that set them up (HLOC_CUDA_CONV).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...buffers.assignment import Slice
from ...errors import InputError
from ...ir import Module, Shape
from ...registry import Registry
from ...thunks.base import Thunk, ThunkKind
from ...thunks.gpu import ConvLaunch, GemmLaunch, GpuProgram, HostCompute, Launch
from ...thunks.thunks import Conditional, Copy, Memset, Sequential, While
from ..executable import ProfileRow
from ..layouts import memory_order
from .graphs import (
    MIN_NESTED_NODES,
    conditional_nodes_enabled,
    graphs_enabled,
    loop_plan,
    nodes,
    segments,
)
from .residency import Residency


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

    def __init__(self, program: GpuProgram, module: Module, device, blas=None, dnn=None):
        self.program = program
        self.module = module
        self.device = device
        # `blas(call, name)` runs a Gemm thunk's BlasCall (cuBLAS or a host BLAS); None: every
        # Gemm thunk launches the GEMM kernel. `blas_calls` counts the thunks it ran.
        self._blas = blas
        self.blas_calls = 0
        # `dnn(call, name)` runs a convolution thunk's ConvCall (cuDNN or the host stand-in)
        # for the thunks `dnn.runs(name)` accepts; None: every one launches its kernel.
        # `dnn_calls` counts the thunks it ran.
        self._dnn = dnn
        self.dnn_calls = 0
        # Device-side collectives (hloc.runtime.cuda.nccl, set for MPI ranks): runs the
        # Collective thunks it planned as NCCL calls; None: every collective is host-staged.
        self.collectives = None
        self.instructions = {i.name: i for c in module.computations for i in c.instructions}
        self.host_impls: dict[str, Callable] = {}  # host thunks' implementations, by name
        self._constants_loaded = False
        self.rows: dict[str, ProfileRow] | None = None
        # `hook(thunk, run)` runs every thunk (it must call run() once): hloc.debug's
        # per-thunk tools; None (the default) costs one test per thunk.
        self.hook: Callable[[Thunk, Callable[[], None]], None] | None = None
        self.residency = Residency(program, len(module.entry.parameters))
        # CUDA graphs (hloc.runtime.cuda.graphs): captured on first use, keyed by the main
        # program's segment or the nested sequence; `graphs_on` is False where the device
        # cannot capture, HLOC_CUDA_GRAPHS=0, or a capture failed once.
        self.graphs_on = graphs_enabled() and getattr(device, "supports_graphs", False)
        # Loops and conditionals as conditional graph nodes (decided on the device) where the
        # device has them and HLOC_CUDA_CONDITIONAL_NODES allows.
        self.conditional_nodes = self.graphs_on and conditional_nodes_enabled() and getattr(
            device, "supports_conditional_nodes", False)
        self.graph_captures = 0
        self.graph_launches = 0
        self._graphs: dict[object, Any] = {}
        self._segments = segments(program.main, self.conditional_nodes)
        self._capturing = False
        # The capture under way built a conditional node (a failure then turns them off).
        self._built_nodes = False
        # Conditional node bodies being captured around the current thunk: cuBLAS and cuDNN
        # calls are refused there (an H200's driver would not instantiate the graph), so
        # their thunks launch hloc's kernels.
        self._node_depth = 0

    @property
    def blas(self):
        return self._blas

    @blas.setter
    def blas(self, engine) -> None:
        """A new GEMM engine: graphs captured with the old one are dropped."""
        self._blas = engine
        self._graphs.clear()

    @property
    def dnn(self):
        return self._dnn

    @dnn.setter
    def dnn(self, engine) -> None:
        """A new convolution engine: graphs captured with the old one are dropped."""
        self._dnn = engine
        self._graphs.clear()

    # ---- the three programs ----------------------------------------------------------------
    def run(self, args: Sequence[np.ndarray], profile: bool = False) -> list[np.ndarray]:
        self._check_args(args)
        self.rows = {} if profile else None
        self.stage(args)
        self.execute()
        return self.fetch()

    def _check_args(self, args) -> None:
        count = len(self.module.entry.parameters)
        if len(args) != count:
            raise InputError(f"module {self.module.name} takes {count} arguments, "
                             f"got {len(args)}")

    def stage(self, args) -> None:
        """Host → device: constants (first run only) and the parameters that need it."""
        self.device.stream = 0
        self._upload_constants()
        items = [self._leaf(u, args[u.number]) for u in self.program.host_to_device
                 if not u.constant and self.residency.needs_upload(u.number, args[u.number])]
        self._copies("(uploads)", "copy-h2d", items, lambda: self.device.upload_arrays(items))
        self.residency.bind(args)

    def execute(self) -> None:
        """The main program (asynchronous on a GPU: `fetch` or `synchronize` waits for it)."""
        self._run_main()
        self.device.stream = 0

    def fetch(self) -> list[np.ndarray]:
        """Device → host: every result leaf, as new arrays."""
        entry = self.module.entry
        items = [(d.slice, entry.root.shape.subshape(d.index)) for d in self.program.device_to_host]
        out: list[np.ndarray] = []
        self._copies("(downloads)", "copy-d2h", items,
                     lambda: out.extend(self.device.download_arrays(items)))
        return out

    def update(self, number: int, array) -> None:
        """Upload resident parameter `number` from `array` now (changed in place, or new)."""
        if number not in self.residency.resident:
            raise InputError(f"parameter {number} is not resident (set_resident first)")
        self.device.stream = 0
        self.device.upload_arrays([self._leaf(u, array) for u in self.program.host_to_device
                                   if not u.constant and u.number == number])
        self.device.synchronize()
        self.residency.bound[number] = array

    def time_device_resident(self, args, n: int) -> list[float]:
        """Seconds of `n` runs of the main program alone, each synchronized: inputs uploaded
        once before, outputs left on the device (what XLA's and PyTorch's benchmarks time)."""
        self._check_args(args)
        self.rows = None
        self.stage(args)
        self.execute()  # warm-up
        self.device.synchronize()
        times = []
        for _ in range(n):
            start = time.perf_counter()
            self.execute()
            self.device.synchronize()
            times.append(time.perf_counter() - start)
        return times

    def _leaf(self, u, value):
        """(slice, array, shape) of upload `u` of a parameter whose value is `value`."""
        shape = self.module.entry.parameters[u.number].shape
        for i in u.index:
            shape, value = shape.tuple_shapes[i], value[i]
        return u.slice, value, shape

    def _upload_constants(self) -> None:
        if self._constants_loaded:
            return
        for u in self.program.host_to_device:
            if u.constant:
                instr = self.instructions[u.constant]
                self.device.upload(u.slice, to_device_bytes(instr.literal.array, instr.shape))
        self._constants_loaded = True

    def _copies(self, name: str, kind: str, items, transfer: Callable[[], None]) -> None:
        """Run `transfer`; when profiling, time it between synchronizations as a row."""
        if self.rows is None:
            transfer()
            return
        self.device.synchronize()
        start = time.perf_counter()
        transfer()
        self.device.synchronize()
        row = self.rows.setdefault(name, ProfileRow(name, kind, f"{len(items)} arrays"))
        row.count += 1
        row.seconds += time.perf_counter() - start
        row.bytes += sum(item[0].size for item in items)

    @property
    def capturing(self) -> bool:
        """A graph capture is under way (device work is recorded, not run)."""
        return self._capturing

    def node_body(self, thunks) -> Callable[[], None]:
        """What captures `thunks` into a conditional node's body (the capture under way now
        builds a conditional node)."""
        self._built_nodes = True

        def capture() -> None:
            self._node_depth += 1
            try:
                self.run_sequence(thunks)
            finally:
                self._node_depth -= 1
        return capture

    def libraries_allowed(self) -> bool:
        """cuBLAS and cuDNN may run the current thunk (not inside a conditional node)."""
        return self._node_depth == 0

    def _graphs_now(self) -> bool:
        return self.graphs_on and not self._capturing and self.rows is None and self.hook is None

    def _run_main(self) -> None:
        """Top-level thunks on their streams, with the assignment's events and waits; each
        capturable segment as one graph launch when graphs are on."""
        if not self._graphs_now():
            self._run_top(0, len(self.program.main))
            return
        for seg in self._segments:
            if seg.graph:
                self._graph(("main", seg.start), True,
                            functools.partial(self._run_top, seg.start, seg.stop))
            else:
                self._run_top(seg.start, seg.stop)

    def _run_top(self, start: int, stop: int) -> None:
        streams = self.program.streams
        main = self.program.main
        if streams is None:
            self.run_sequence(main[start:stop])
            return
        waits: dict[int, list[int]] = {}
        for i, event in streams.waits:
            waits.setdefault(i, []).append(event)
        records = {j: (event, s) for event, s, j in streams.events}
        for i in range(start, stop):
            self.device.stream = streams.streams[i]
            for event in waits.get(i, ()):
                self.device.wait_event(event)
            self.run_sequence((main[i],))
            if i in records:
                self.device.record_event(records[i][0])

    def run_nested(self, thunks) -> None:
        """A sequence nested in host-driven control flow (a loop body or condition, a
        branch): one graph launch per run where it captures to enough operations."""
        if self._graphs_now():
            count = MIN_NESTED_NODES if id(thunks) in self._graphs else \
                nodes(thunks, self.conditional_nodes)
            if count is not None and count >= MIN_NESTED_NODES:
                self._graph(id(thunks), False, lambda: self.run_sequence(thunks), thunks)
                return
        self.run_sequence(thunks)

    def _graph(self, key, all_streams: bool, body: Callable[[], None], owner=None) -> None:
        """Launch the graph of `key`, capturing `body` into it first if needed. `all_streams`:
        a segment of the main program (stream 0 forks and joins the others); else the
        current stream alone. A capture that fails turns graphs off (one line on stderr) and
        runs `body` directly: nothing ran during the capture."""
        entry = self._graphs.get(key)
        # A graph is captured on, ended on and launched into one stream: stream 0 for a
        # segment (the thunks it runs move the device between streams), else the current one.
        stream = 0 if all_streams else self.device.stream
        if entry is None:
            self.device.stream = stream
            self.device.begin_capture(all_streams)
            self._capturing, self._built_nodes = True, False
            failed: Exception | None = None
            try:
                body()
            except InputError:
                self.device.stream = stream
                self.device.abort_capture()
                raise
            except Exception as e:  # a driver refusing the capture: run without graphs
                failed = e
            finally:
                self._capturing = False
            if failed is not None:
                self.device.stream = stream
                self.device.abort_capture()
                self._graphs_failed(failed)
                body()
                return
            self.device.stream = stream
            try:
                graph = self.device.end_capture(all_streams)
            except Exception as e:
                self.device.abort_capture()
                self._graphs_failed(e)
                body()
                return
            # `owner` keeps a nested sequence (and so its id) alive as long as its graph.
            entry = self._graphs[key] = (graph, owner)
            self.graph_captures += 1
        self.device.stream = stream
        self.device.launch_graph(entry[0], all_streams)
        self.graph_launches += 1

    def _graphs_failed(self, error: Exception) -> None:
        """A failed capture that built conditional nodes turns them off (the graphs are
        planned again without them); any other turns graphs off."""
        import sys

        if self._built_nodes:
            self.conditional_nodes = False
            self._segments = segments(self.program.main)
            self._graphs.clear()
            print(f"hloc: CUDA conditional graph nodes off for this executable: {error}",
                  file=sys.stderr)
            return
        self.graphs_on = False
        print(f"hloc: CUDA graphs off for this executable: {error}", file=sys.stderr)

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


# runner(r, thunk): `thunk` is of the class its kind (the registry key) names, which a runner
# declares (Launch, Copy, ...); the registry cannot tie key to class: Any.
Runner = Callable[[GpuRunner, Any], None]
RUNNERS: Registry[ThunkKind, Runner] = Registry("GPU thunk runner",
                                         modules=("hloc.runtime.cuda.collectives",))
runs = RUNNERS.register


@runs(ThunkKind.KERNEL)
def _launch(r: GpuRunner, t: Launch) -> None:
    r.device.launch(t)


@runs(ThunkKind.GEMM)
def _gemm(r: GpuRunner, t: GemmLaunch) -> None:
    if t.blas is None or r.blas is None or not r.libraries_allowed():
        r.device.launch(t)
        return
    r.device.enqueue(lambda: r.blas(t.blas, t.name))
    r.blas_calls += 1


@runs(ThunkKind.CONVOLUTION)
def _convolution(r: GpuRunner, t: ConvLaunch) -> None:
    if t.dnn is None or r.dnn is None or not r.dnn.runs(t.name) or not r.libraries_allowed():
        r.device.launch(t)
        return
    r.device.enqueue(lambda: r.dnn(t.dnn, t.name))
    r.dnn_calls += 1


@runs(ThunkKind.COPY)
def _copy(r: GpuRunner, t: Copy) -> None:
    r.device.copy(t.source, t.destination)


@runs(ThunkKind.MEMSET)
def _memset(r: GpuRunner, t: Memset) -> None:
    r.device.memset(t.destination, t.byte)


@runs(ThunkKind.WHILE)
def _while(r: GpuRunner, t: While) -> None:
    if r.capturing and loop_plan(t, r.conditional_nodes)[0] == "node":
        r.device.while_node(r.node_body(t.condition), r.node_body(t.body), t.predicate)
        return
    if t.trip_count is not None:
        for _ in range(t.trip_count):
            r.run_nested(t.body)
        return
    pred = Shape.scalar("pred")
    while True:
        r.run_nested(t.condition)
        if not r.scalar(t.predicate, pred):
            return
        r.run_nested(t.body)


@runs(ThunkKind.CONDITIONAL)
def _conditional(r: GpuRunner, t: Conditional) -> None:
    if r.capturing and r.conditional_nodes:  # the graph plan put it in a conditional node
        r.device.switch_node([r.node_body(b) for b in t.branches], t.selector,
                             t.selector_is_pred)
        return
    instr = r.instructions[t.name]
    r.run_nested(t.branches[t.branch(r.scalar(t.selector, instr.operands[0].shape))])


@runs(ThunkKind.SEQUENTIAL)
def _sequential(r: GpuRunner, t: Sequential) -> None:
    r.run_sequence(t.thunks)


@runs(ThunkKind.HOST)
def _host(r: GpuRunner, t: HostCompute) -> None:
    from ..interpreter import evaluate_computation, registry
    from ..lapack import native_impl

    instr = r.instructions[t.name]
    pending = list(t.operands)
    operands = [_read_value(r, op.shape, pending) for op in instr.operands]
    impl = r.host_impls.get(t.name)
    if impl is None:
        # LAPACK's routines where the CPU runtime calls them (its batch loop costs about
        # 2 us a matrix), else the reference interpreter (whose LU of 4,096 3 x 3 matrices,
        # in f64 NumPy, took 180 ms).
        impl = r.host_impls[t.name] = native_impl(instr) or registry.lookup(instr)
    result = impl(registry.Context(evaluate_computation), instr, operands)
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


class GpuExecutable:
    """What `--device cuda` and `cuda-emulated` executables share: runs, profiles,
    device-resident parameters (hloc.runtime.cuda.residency) and the device-resident timing.
    A subclass sets `runner`."""

    runner: GpuRunner

    def run(self, args: list[np.ndarray]) -> list[np.ndarray]:
        return self.runner.run(args)

    def run_profiled(self, args: list[np.ndarray]):
        outputs = self.runner.run(args, profile=True)
        return outputs, profile_rows(self.runner)

    def set_resident(self, numbers) -> frozenset[int]:
        """Keep these parameters on the device between runs; returns those that can be."""
        return self.runner.residency.set(numbers)

    @property
    def resident(self) -> frozenset[int]:
        return self.runner.residency.resident

    def update(self, number: int, array) -> None:
        """Re-upload resident parameter `number` from `array` (e.g. after changing it)."""
        self.runner.update(number, array)

    def time_device_resident(self, args, n: int) -> list[float]:
        """Seconds per run of the main program with inputs and outputs on the device."""
        return self.runner.time_device_resident(args, n)
