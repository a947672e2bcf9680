"""`--device cuda-emulated`: run a CUDA bundle's kernels on the host.

The kernels are rebuilt from their recipes in gpu_thunks.json and the bundle's HLO, checked
against the recorded digest of the bundled kernel IR (so exactly the bundled kernels run),
rewritten for the host (hloc.codegen.cuda.emulate: thread/block indices as arguments,
barriers and warp shuffles by phase splitting, shared memory per block) and compiled with
LLVM for this CPU. Device memory is host memory: one byte array per allocation of the
buffer assignment. The GPU thunk schedule runs with its streams serialized.
Parameters marked resident stay in the arena between runs by the same rule as on a GPU
(hloc.runtime.cuda.residency), so CI tests it.
With HLOC_CUDA_GEMM=cublas, Gemm thunks carrying a BLAS descriptor run it through numpy's
OpenBLAS under cuBLAS' column-major contract (hloc.runtime.cuda.host_blas) instead of the kernel;
with HLOC_CUDA_CONV=cudnn, convolution thunks carrying a cuDNN descriptor run it under cuDNN's
contract on the host (hloc.runtime.cuda.host_conv).
"""

from __future__ import annotations

import copy
import time

import numpy as np

from ...buffers.assignment import Slice
from ...errors import InputError
from ...thunks.gpu import Launch
from ...thunks.serialize import gpu_program_from_json
from ..executable import register_device
from .cond_nodes import switch_index
from .cublas import use_cublas
from .cudnn import use_cudnn
from .host_blas import HostBlas
from .host_conv import HostConv
from .program import GpuExecutable, GpuRunner
from .transfers import read_array, write_array


class HostMemory:
    """Device memory emulated by aligned numpy byte arrays (streams run in program order)."""

    ALIGN = 256

    def __init__(self, allocations, library):
        self.library = library
        self.stream = 0
        self.arrays = {}
        self.base = {}
        self.workspaces: list[np.ndarray] = []
        for a in allocations:
            raw = np.zeros(a.size + self.ALIGN, np.uint8)
            skip = (-raw.ctypes.data) % self.ALIGN
            self.arrays[a.index] = raw[skip:skip + a.size]
            self.base[a.index] = raw.ctypes.data + skip

    def view(self, s: Slice) -> np.ndarray:
        return self.arrays[s.allocation][s.offset:s.offset + s.size]

    def upload(self, s: Slice, data: bytes) -> None:
        self._host("upload")
        self.view(s)[:] = np.frombuffer(data, np.uint8)

    def download(self, s: Slice) -> bytes:
        self._host("download")
        return self.view(s).tobytes()

    def upload_arrays(self, items) -> None:
        """(slice, array, shape) items written straight into the arena (device layout)."""
        self._host("upload")
        for s, value, shape in items:
            write_array(self.view(s), value, shape)

    def download_arrays(self, items) -> list[np.ndarray]:
        self._host("download")
        return [read_array(self.view(s), shape) for s, shape in items]

    def copy(self, src: Slice, dst: Slice) -> None:
        self.enqueue(lambda: self.view(dst).__setitem__(slice(None), self.view(src).copy()))

    def memset(self, dst: Slice, byte: int) -> None:
        self.enqueue(lambda: self.view(dst).__setitem__(slice(None), byte))

    # ---- CUDA graphs, as a recording of the queued operations -----------------------------
    # While capturing, device work is recorded instead of run, and a host transfer is the
    # error a GPU gives (a capture cannot wait for the host): the runner's graph plan is
    # checked here exactly as on a GPU. A launch replays the recording.
    supports_graphs = True
    _recording: list | None = None

    def enqueue(self, fn) -> None:
        if self._recording is not None:
            self._recording.append(fn)
        else:
            fn()

    def _host(self, what: str) -> None:
        if self._recording is not None:
            raise RuntimeError(f"a host {what} inside a graph capture")

    def begin_capture(self, all_streams: bool) -> None:
        if self._recording is not None:
            raise RuntimeError("graph capture already under way")
        self._recording = []
        self._origin = self.stream

    def end_capture(self, all_streams: bool) -> tuple:
        # A GPU ends a capture only on the stream that began it (else: unmatched).
        if self.stream != self._origin:
            raise RuntimeError(f"capture begun on stream {self._origin} ended on stream "
                               f"{self.stream}")
        ops, self._recording = tuple(self._recording or ()), None
        return ops

    def abort_capture(self) -> None:
        self._recording = None

    def launch_graph(self, graph: tuple, all_streams: bool) -> None:
        self._host("graph launch")
        for op in graph:
            op()

    # Conditional nodes (hloc.runtime.cuda.cond_nodes), recorded as the GPU builds them: the
    # condition before the node and at the end of its body, the node reading the predicate
    # (or mapping the selector by the set kernel's rule) when the graph reaches it.
    supports_conditional_nodes = True

    def _captured(self, fill) -> tuple:
        """What `fill` queues, recorded apart (a conditional node's body)."""
        if self._recording is None:
            raise RuntimeError("a conditional node outside a graph capture")
        outer, self._recording = self._recording, []
        try:
            fill()
            return tuple(self._recording)
        finally:
            self._recording = outer

    def while_node(self, condition, body, predicate: Slice) -> None:
        first = self._captured(condition)
        looped = self._captured(lambda: (body(), condition()))
        flag = self.view(predicate)

        def node() -> None:
            for op in first:
                op()
            while flag[0]:
                for op in looped:
                    op()

        self.enqueue(node)

    def switch_node(self, branches, selector: Slice, is_pred: bool) -> None:
        bodies = [self._captured(branch) for branch in branches]
        raw = self.view(selector)

        def node() -> None:
            for op in bodies[switch_index(raw.tobytes(), is_pred, len(bodies))]:
                op()

        self.enqueue(node)

    def address(self, s: Slice) -> int:
        return self.base[s.allocation] + s.offset

    def allocate(self, nbytes: int) -> int:
        """A library's workspace outside the buffer assignment (kept as long as the device)."""
        raw = np.zeros(nbytes + self.ALIGN, np.uint8)
        self.workspaces.append(raw)
        return raw.ctypes.data + (-raw.ctypes.data) % self.ALIGN

    def stream_handle(self) -> int:
        """The current stream's number (what a GPU's cudaStream_t stands for here)."""
        return self.stream

    def launch(self, t: Launch) -> None:
        pointers = [self.address(s) for s in t.args]
        self.enqueue(lambda: self.library.launch(t.kernel, t.grid, t.block, pointers))

    def synchronize(self) -> None:
        pass

    def record_event(self, event: int) -> None:
        pass

    def wait_event(self, event: int) -> None:
        pass

    def timed(self, fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start


def load_emulated_kernels(bundle, module, program):
    """Rebuild, check, transform and compile the bundle's kernels for the host."""
    # The one codegen dependency of the runtime: emulation JIT-compiles the kernels from their
    # recipes (the bundle's PTX cannot run on a CPU).
    from ...codegen.cuda.emulate.load import load_kernels

    archs = tuple(bundle.manifest["target"].get("cuda_archs", ()))
    return load_kernels(program, module, archs, bundle.path)


class CudaEmulatedExecutable(GpuExecutable):
    """A CUDA bundle executed by the host emulator."""

    device = "cuda-emulated"

    def __init__(self, bundle):
        from ...frontend import load_bytes

        self.bundle = bundle
        if "gpu_thunks.json" not in bundle.members:
            raise InputError("bundle has no gpu_thunks.json (not a CUDA bundle)", bundle.path)
        self.program, self.resources = gpu_program_from_json(bytes(bundle.members["gpu_thunks.json"]))
        self.module = load_bytes(bytes(bundle.module_proto), f"{bundle.path}:module.pb").module
        self.library = load_emulated_kernels(bundle, self.module, self.program)
        self._new_device()

    def _new_device(self) -> None:
        self.memory = HostMemory(self.program.allocations, self.library)
        blas = HostBlas(self.memory) if use_cublas() else None
        dnn = HostConv(self.memory, self.program) if use_cudnn() else None
        self.runner = GpuRunner(self.program, self.module, self.memory, blas, dnn)

    def sibling(self) -> CudaEmulatedExecutable:
        """Another device of the same bundle: the compiled kernels shared (launches allocate
        their frames per call), its own memory and runner (multi-device runs)."""
        twin = copy.copy(self)
        twin._new_device()
        return twin

    def run_hooked(self, args: list[np.ndarray], hook) -> list[np.ndarray]:
        """Run with `hook(thunk, run)` around every GPU thunk (see GpuRunner.hook)."""
        self.runner.hook = hook
        try:
            return self.runner.run(args)
        finally:
            self.runner.hook = None


register_device("cuda-emulated", frozenset({"cuda"}))(CudaEmulatedExecutable)
