"""`--device cuda`: run a CUDA bundle on an NVIDIA GPU through the driver API.

Uses NVIDIA's `cuda-bindings` (`pip install hloc[cuda]`), imported on first use. One
executable holds: the primary context of device 0 (or $HLOC_CUDA_DEVICE; an MPI rank: its
node-local rank's device), the module loaded from the cubin of the device's architecture
(else the PTX of the newest architecture not above it, JIT-compiled by the driver), a kernel
cache, one device arena for every allocation of the buffer assignment, constants uploaded
once, one stream per stream of the schedule with events for cross-stream dependencies. `run_profiled` times each thunk with CUDA events.
Every failure is one clear line: cuda-bindings missing, no driver or GPU, a bundle built for
other architectures, out of device memory.

Parameters and results travel through page-locked staging on a copy stream of their own
(hloc.runtime.cuda.transfers), ordered against the compute streams by events; parameters
marked resident stay on the device between runs (hloc.runtime.cuda.residency).

The Gemm thunks that carry a BLAS descriptor (plain dots) run through cuBLAS whenever
libcublas loads (the nvidia-cublas wheel, $CUDA_HOME or the system loader), else hloc's GEMM
kernel; HLOC_CUDA_GEMM=kernel|cublas forces either (hloc.runtime.cuda.cublas). Convolution
thunks that carry a cuDNN descriptor run through cuDNN the same way whenever libcudnn loads
and accepts them (the nvidia-cudnn-cu13 wheel, ...), else hloc's kernels with one warning;
HLOC_CUDA_CONV=kernel|cudnn forces either (hloc.runtime.cuda.cudnn).
"""

from __future__ import annotations

import ctypes
import os
import socket

import numpy as np

from ...errors import HlocError, InputError
from ...thunks.gpu import ConvLaunch, GemmLaunch
from ...thunks.serialize import gpu_program_from_json
from ..executable import register_device
from .cond_nodes import ConditionalNodes
from .cond_nodes import supported as conditional_nodes_supported
from .program import GpuExecutable, GpuRunner
from .transfers import PinnedStaging, read_array, write_array

ARENA_ALIGN = 256
# What MPI launchers set to this process's rank among the ranks on its node (MPICH's hydra,
# Open MPI, Slurm).
_LOCAL_RANK_ENV = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")


class CudaError(HlocError):
    """A CUDA driver failure (exit 2 through the CLI: no device, out of memory, ...)."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        raise CudaError("--device cuda needs NVIDIA's cuda-bindings: install hloc[cuda] "
                        "(pip install 'cuda-bindings>=12')") from None
    return driver


def check(cu, result, what: str):
    """Unwrap a driver call's (CUresult, values...) tuple; CudaError on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        if err == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            raise CudaError(f"{what}: out of GPU memory")
        raise CudaError(f"{what} failed: {name.decode() if name else err}")
    return values[0] if len(values) == 1 else tuple(values)


def _init(cu) -> int:
    try:
        check(cu, cu.cuInit(0), "cuInit")
    except CudaError:
        raise
    except Exception as e:  # the bindings raise their own error when libcuda is absent
        raise CudaError(f"no NVIDIA driver found ({type(e).__name__}): --device cuda needs a "
                        "GPU; use --device cuda-emulated to run on the CPU") from None
    count = check(cu, cu.cuDeviceGetCount(), "cuDeviceGetCount")
    if count == 0:
        raise CudaError("no CUDA GPU found; use --device cuda-emulated to run on the CPU")
    chosen = os.environ.get("HLOC_CUDA_DEVICE")
    # An MPI rank without HLOC_CUDA_DEVICE takes its node-local rank's GPU (NCCL needs a GPU
    # per rank); a lone process takes GPU 0.
    local = next((int(os.environ[n]) for n in _LOCAL_RANK_ENV
                  if os.environ.get(n, "").isdigit()), 0)
    index = int(chosen) if chosen is not None else local % count
    if not 0 <= index < count:
        raise CudaError(f"HLOC_CUDA_DEVICE={index}: only {count} CUDA device(s)")
    return index


def pick_image(members, archs: list[str], major: int, minor: int) -> tuple[str, bytes]:
    """(member name, image) to load: the device's cubin, else the best PTX to JIT."""
    exact = f"sm_{major}{minor}"
    if f"kernels.{exact}.cubin" in members:
        return f"kernels.{exact}.cubin", bytes(members[f"kernels.{exact}.cubin"])
    usable = [a for a in archs if int(a[3:].rstrip("abcdefghijklmnopqrstuvwxyz"))
              <= major * 10 + minor and f"kernels.{a}.ptx" in members]
    if not usable:
        raise CudaError(f"bundle was compiled for {', '.join(archs)} and has no code this "
                        f"{exact} GPU can run; recompile with --cuda-arch {exact}")
    best = max(usable, key=lambda a: int(a[3:].rstrip("abcdefghijklmnopqrstuvwxyz")))
    return f"kernels.{best}.ptx", bytes(members[f"kernels.{best}.ptx"]) + b"\0"


class CudaDevice:
    """Device memory, streams, events and kernel launches for one executable."""

    def __init__(self, cu, program, image: bytes):
        self.cu = cu
        self.stream = 0
        self.module = check(cu, cu.cuModuleLoadData(image), "loading the kernels")
        self.kernels: dict[str, object] = {}
        self.extra: list = []
        self._arena(program.allocations)
        num = program.streams.num_streams if program.streams else 1
        self.streams = [check(cu, cu.cuStreamCreate(0), "cuStreamCreate") for _ in range(num)]
        count = len(program.streams.events) if program.streams else 0
        self.events = [check(cu, cu.cuEventCreate(0), "cuEventCreate") for _ in range(count)]
        # Graph capture (hloc.runtime.cuda.graphs): per stream, one event to order streams
        # outside a capture and one to fork and join them inside it (an event last recorded
        # in a capture cannot be waited on outside it). `_captured`: the program's events
        # recorded in the capture under way; `_stale`: those last recorded in a capture,
        # which later waits skip (a graph launch orders every stream after the graph).
        no_timing = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
        self._links_out, self._links_in = (
            [check(cu, cu.cuEventCreate(no_timing), "cuEventCreate") for _ in range(num)]
            for _ in range(2))
        self._captured: set[int] | None = None
        self._stale: set[int] = set()
        # Conditional graph nodes (hloc.runtime.cuda.cond_nodes): the streams their bodies are
        # being captured on, innermost last (work goes there while it is not empty).
        self.inner_streams: list = []
        self._conditional = None
        self.supports_conditional_nodes = conditional_nodes_supported(
            check(cu, cu.cuDriverGetVersion(), "cuDriverGetVersion"))
        self.staging = PinnedStaging(
            cu, [u.slice for u in program.host_to_device if not u.constant],
            [d.slice for d in program.device_to_host])

    def _arena(self, allocations) -> None:
        self.offsets, total = {}, 0
        for a in allocations:
            self.offsets[a.index] = total
            total += -(-max(1, a.size) // ARENA_ALIGN) * ARENA_ALIGN
        self.base = check(self.cu, self.cu.cuMemAlloc(max(1, total)),
                          f"allocating {total} bytes of device memory")

    def address(self, s) -> int:
        return int(self.base) + self.offsets[s.allocation] + s.offset

    def allocate(self, nbytes: int) -> int:
        """Device memory outside the arena (a library's workspace), kept for the executable's
        lifetime; its address."""
        ptr = check(self.cu, self.cu.cuMemAlloc(nbytes), f"allocating {nbytes} bytes of "
                    "workspace")
        self.extra.append(ptr)
        return int(ptr)

    def _s(self):
        return self.inner_streams[-1] if self.inner_streams else self.streams[self.stream]

    def current_stream(self):
        return self._s()

    def stream_handle(self) -> int:
        """The current stream as the cudaStream_t value other CUDA libraries take."""
        return int(self._s())

    def function(self, name: str):
        fn = self.kernels.get(name)
        if fn is None:
            fn = check(self.cu, self.cu.cuModuleGetFunction(self.module, name.encode()),
                       f"kernel {name}")
            self.kernels[name] = fn
        return fn

    def upload(self, s, data: bytes) -> None:
        host = np.frombuffer(data, np.uint8)
        check(self.cu, self.cu.cuMemcpyHtoDAsync(self.address(s), host, len(data), self._s()),
              "copy to device")
        check(self.cu, self.cu.cuStreamSynchronize(self._s()), "copy to device")

    def download(self, s) -> bytes:
        host = np.empty(s.size, np.uint8)
        check(self.cu, self.cu.cuMemcpyDtoHAsync(host, self.address(s), s.size, self._s()),
              "copy to host")
        check(self.cu, self.cu.cuStreamSynchronize(self._s()), "copy to host")
        return host.tobytes()

    # ---- parameters and results: pinned staging on the copy stream ------------------------
    def upload_arrays(self, items) -> None:
        """Upload (slice, array, shape) items: each array is written into its pinned slot
        (dtype and layout converted on the way) and its DMA queued on the copy stream at
        once, so the next array's host copy overlaps this one's transfer. The compute
        streams then wait for the copies (an event, not a host synchronization)."""
        if not items:
            return
        cu, staging = self.cu, self.staging
        for s, value, shape in items:
            offset = staging.up_slots[s]
            write_array(staging.up.view(offset, s.size), value, shape)
            check(cu, cu.cuMemcpyHtoDAsync(self.address(s), staging.up.address + offset, s.size,
                                           staging.stream), "copy to device")
        check(cu, cu.cuEventRecord(staging.uploaded, staging.stream), "cuEventRecord")
        for stream in self.streams:
            check(cu, cu.cuStreamWaitEvent(stream, staging.uploaded, 0), "cuStreamWaitEvent")

    def download_arrays(self, items) -> list[np.ndarray]:
        """Results for (slice, shape) items: the copy stream waits for every compute stream,
        DMAs each result into its pinned slot, synchronizes once, and the results are
        copied out into arrays the caller owns (the slots are reused by the next run)."""
        cu, staging = self.cu, self.staging
        for stream, event in zip(self.streams, staging.computed_events(len(self.streams)),
                                 strict=True):
            check(cu, cu.cuEventRecord(event, stream), "cuEventRecord")
            check(cu, cu.cuStreamWaitEvent(staging.stream, event, 0), "cuStreamWaitEvent")
        for s, _ in items:
            check(cu, cu.cuMemcpyDtoHAsync(staging.down.address + staging.down_slots[s],
                                           self.address(s), s.size, staging.stream),
                  "copy to host")
        check(cu, cu.cuStreamSynchronize(staging.stream), "copy to host")
        return [read_array(staging.down.view(staging.down_slots[s], s.size), shape)
                for s, shape in items]

    def copy(self, src, dst) -> None:
        check(self.cu, self.cu.cuMemcpyDtoDAsync(self.address(dst), self.address(src), src.size,
                                                 self._s()), "device copy")

    def memset(self, dst, byte: int) -> None:
        check(self.cu, self.cu.cuMemsetD8Async(self.address(dst), byte, dst.size, self._s()),
              "memset")

    def launch(self, t) -> None:
        values = [ctypes.c_void_p(self.address(s)) for s in t.args]
        params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        # No dynamic shared memory: every kernel declares its shared arrays statically
        # (codegen.cuda.nvvm), which t.shared_bytes records. Asking for it again as dynamic
        # memory doubled each block's share (fewer blocks per SM) and failed the launches
        # whose two shares passed 48 KiB.
        check(self.cu, self.cu.cuLaunchKernel(self.function(t.kernel), *t.grid, *t.block,
                                              0, self._s(), ctypes.addressof(params),
                                              0), f"launching {t.kernel}")

    def synchronize(self) -> None:
        check(self.cu, self.cu.cuCtxSynchronize(), "synchronize")

    def record_event(self, event: int) -> None:
        if self._captured is not None:
            self._captured.add(event)
            self._stale.add(event)
        else:
            self._stale.discard(event)
        check(self.cu, self.cu.cuEventRecord(self.events[event], self._s()), "cuEventRecord")

    def wait_event(self, event: int) -> None:
        if self._captured is not None and event not in self._captured:
            return  # recorded before the graph: the fork at its start already orders it
        if self._captured is None and event in self._stale:
            return  # recorded in a graph: its launch ordered every stream after it
        check(self.cu, self.cu.cuStreamWaitEvent(self._s(), self.events[event], 0),
              "cuStreamWaitEvent")

    # ---- CUDA graphs (hloc.runtime.cuda.graphs) ------------------------------------------
    supports_graphs = True

    def enqueue(self, fn) -> None:
        """Run `fn`, which queues device work on the current stream (a library call)."""
        fn()

    def _link(self, sources, target) -> None:
        """`target` waits for the work queued so far on each of `sources` (stream numbers)."""
        cu = self.cu
        links = self._links_in if self._captured is not None else self._links_out
        for k in sources:
            check(cu, cu.cuEventRecord(links[k], self.streams[k]), "cuEventRecord")
            check(cu, cu.cuStreamWaitEvent(self.streams[target], links[k], 0),
                  "cuStreamWaitEvent")

    def begin_capture(self, all_streams: bool) -> None:
        """Capture what is queued on the current stream from now on; `all_streams`: on stream
        0, with every other stream forked from it (and first ordered before it)."""
        cu, others = self.cu, range(1, len(self.streams))
        if all_streams:
            self._link(others, 0)
        check(cu, cu.cuStreamBeginCapture(
            self._s(), cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture")
        self._captured = set()
        if all_streams:
            for k in others:
                self._link((0,), k)

    def end_capture(self, all_streams: bool):
        """The executable graph of the capture (the other streams joined back first)."""
        cu = self.cu
        if all_streams:
            self._link(range(1, len(self.streams)), 0)
        self._captured = None
        graph = check(cu, cu.cuStreamEndCapture(self._s()), "cuStreamEndCapture")
        try:
            return check(cu, cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        finally:
            cu.cuGraphDestroy(graph)

    def abort_capture(self) -> None:
        """End whatever capture a failure left open, on every stream (nothing of it ran)."""
        cu = self.cu
        self._captured = None
        if self._conditional is not None:
            self._conditional.abort()
        active = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
        for stream in self.streams:
            err, status = cu.cuStreamIsCapturing(stream)
            if err != cu.CUresult.CUDA_SUCCESS or status == active:
                continue
            _, graph = cu.cuStreamEndCapture(stream)
            if graph is not None and int(graph):
                cu.cuGraphDestroy(graph)

    def launch_graph(self, graph, all_streams: bool) -> None:
        check(self.cu, self.cu.cuGraphLaunch(graph, self._s()), "cuGraphLaunch")
        if all_streams:  # later work on any stream runs after the graph
            for k in range(1, len(self.streams)):
                self._link((0,), k)

    def _conditional_nodes(self):
        if self._conditional is None:
            self._conditional = ConditionalNodes(self)
        return self._conditional

    def while_node(self, condition, body, predicate) -> None:
        """Inside a capture: `condition`, then a WHILE node running `body` and `condition`
        while the pred at slice `predicate` is true."""
        self._conditional_nodes().while_node(condition, body, self.address(predicate))

    def switch_node(self, branches, selector, is_pred: bool) -> None:
        """Inside a capture: a SWITCH node running the branch the selector at slice
        `selector` picks (cond_nodes.switch_index)."""
        self._conditional_nodes().switch_node(branches, self.address(selector), is_pred)

    def timed(self, fn) -> float:
        start = check(self.cu, self.cu.cuEventCreate(0), "cuEventCreate")
        end = check(self.cu, self.cu.cuEventCreate(0), "cuEventCreate")
        check(self.cu, self.cu.cuEventRecord(start, self._s()), "cuEventRecord")
        fn()
        check(self.cu, self.cu.cuEventRecord(end, self._s()), "cuEventRecord")
        check(self.cu, self.cu.cuEventSynchronize(end), "cuEventSynchronize")
        ms = check(self.cu, self.cu.cuEventElapsedTime(start, end), "cuEventElapsedTime")
        for e in (start, end):
            self.cu.cuEventDestroy(e)
        return float(ms) / 1000.0


class CudaExecutable(GpuExecutable):
    """A CUDA bundle loaded on a GPU."""

    device = "cuda"

    def __init__(self, bundle):
        from ...frontend import load_bytes

        self.bundle = bundle
        if "gpu_thunks.json" not in bundle.members:
            raise InputError("bundle has no gpu_thunks.json (not a CUDA bundle)", bundle.path)
        cu = _driver()
        index = _init(cu)
        dev = self.cuda_device = check(cu, cu.cuDeviceGet(index), "cuDeviceGet")
        attr = cu.CUdevice_attribute
        major = check(cu, cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "device query")
        minor = check(cu, cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "device query")
        self.context = check(cu, cu.cuDevicePrimaryCtxRetain(dev), "creating a CUDA context")
        check(cu, cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        archs = list(bundle.manifest["target"].get("cuda_archs", []))
        self.image_name, image = pick_image(bundle.members, archs, major, minor)
        self.program, self.resources = gpu_program_from_json(bytes(bundle.members["gpu_thunks.json"]))
        self.module = load_bytes(bytes(bundle.module_proto), f"{bundle.path}:module.pb").module
        self.memory = CudaDevice(cu, self.program, image)
        self.runner = GpuRunner(self.program, self.module, self.memory, self._blas(),
                                self._dnn())

    def gpu_identity(self) -> str:
        """host:domain:bus:device of this executable's GPU (ranks sharing a GPU cannot join
        one NCCL communicator)."""
        cu = self.memory.cu
        attr = cu.CUdevice_attribute
        ids = [check(cu, cu.cuDeviceGetAttribute(
            getattr(attr, f"CU_DEVICE_ATTRIBUTE_PCI_{part}_ID"), self.cuda_device), "device query")
            for part in ("DOMAIN", "BUS", "DEVICE")]
        return f"{socket.gethostname()}:{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}"

    def _current(self) -> None:
        """Make this executable's context current on the calling thread: a multi-device
        bundle runs each device from its own thread (runtime/spmd_bundles.py)."""
        check(self.memory.cu, self.memory.cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def run(self, args):
        self._current()
        return super().run(args)

    def run_profiled(self, args):
        self._current()
        return super().run_profiled(args)

    def update(self, number: int, array) -> None:
        self._current()
        super().update(number, array)

    def time_device_resident(self, args, n: int) -> list[float]:
        self._current()
        return super().time_device_resident(args, n)

    def _blas(self):
        """cuBLAS for the descriptor-carrying Gemm thunks (HLOC_CUDA_GEMM, cuda_blas), or
        None: hloc's GEMM kernel."""
        from .cublas import CublasGemm, dot_precisions, gemm_mode, select_gemm, tf32_allowed

        mode, tf32 = gemm_mode(), tf32_allowed()
        described = any(isinstance(t, GemmLaunch) and t.blas is not None
                        for t in self.program.walk())
        self.blas = select_gemm(mode, described, lambda: CublasGemm(
            self.memory, precisions=dot_precisions(self.module), tf32=tf32))
        return self.blas

    def _dnn(self):
        """cuDNN for the descriptor-carrying convolution thunks (HLOC_CUDA_CONV, cudnn), or
        None: hloc's convolution kernels."""
        from .cublas import tf32_allowed
        from .cudnn import CudnnConv, conv_mode, conv_precisions, deterministic, select_conv

        mode, tf32, only_deterministic = conv_mode(), tf32_allowed(), deterministic()
        described = any(isinstance(t, ConvLaunch) and t.dnn is not None
                        for t in self.program.walk())
        self.dnn = select_conv(mode, described, lambda: CudnnConv(
            self.memory, self.program, precisions=conv_precisions(self.module), tf32=tf32,
            only_deterministic=only_deterministic, auto=mode == "auto"))
        return self.dnn


register_device("cuda", frozenset({"cuda"}))(CudaExecutable)
