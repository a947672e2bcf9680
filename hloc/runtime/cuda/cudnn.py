"""cuDNN for the convolution thunks that carry a cuDNN descriptor (thunks.gpu.ConvCall).

The switch, HLOC_CUDA_CONV (`conv_mode`), mirrors HLOC_CUDA_GEMM (hloc.runtime.cuda.cublas):
- unset, empty or `auto` (the default): on `--device cuda`, cuDNN whenever libcudnn loads and
  sets up, else hloc's convolution kernels with one warning (`select_conv`); on
  `--device cuda-emulated`, the kernels;
- `kernel`: hloc's kernels for every convolution;
- `cudnn`: cuDNN, and a clear error when libcudnn is missing or cudnnCreate fails; on
  `cuda-emulated`, the same descriptors through a host implementation of cuDNN's contract
  (hloc.runtime.cuda.host_conv), so the descriptors are tested without a GPU.
A convolution cuDNN refuses at setup (a descriptor it does not support, no algorithm within
the workspace limit) runs hloc's kernel, with one warning per executable.

Each described thunk is one call of the legacy API (cuDNN 8 and 9 ship it: libcudnn.so.9 is
a dispatcher that dlopens libcudnn_graph/ops/cnn/... by soname, which is why the sub-libraries
next to it are preloaded with RTLD_GLOBAL first), by the descriptor's direction (DIRECTIONS):
cudnnConvolutionForward, cudnnConvolutionBackwardData (transposed convolutions) or
cudnnConvolutionBackwardFilter (weight gradients), in CUDNN_CROSS_CORRELATION or
CUDNN_CONVOLUTION mode. Descriptors, the algorithm (the direction's _v7 heuristic's first
supported, deterministic, non-FFT choice) and one workspace (a slot per stream of the
schedule: convolutions on different streams may run at once; allocated here, never during a
CUDA-graph capture) are made once per executable; the handle is bound to the schedule's
current stream before each call. A descriptor with filter strides (ConvCall.w_strides: jax's
HWIO filters, OHWI, ...; read filters only) first converts the filter with
cudnnTransformTensor into a copy packed in the descriptor's format (K, C, spatial for NCHW;
K, spatial, C for NHWC, which backward calls with NHWC-strided activations need) that lies in
the same slot after the algorithm's workspace, on every call (filters are parameters and may
change between runs), then uses the copy with the filter descriptor of that format.

Precision, as XLA's GPU back end decides it for convolutions (TF32 allowed when every operand
precision is at most HIGH) and as hloc does for dots: HLOC_CUDA_TF32 unset or 0 computes every
f32 convolution in full f32 (CUDNN_FMA_MATH: no tensor cores); HLOC_CUDA_TF32=1 applies XLA's
rule (CUDNN_TENSOR_OP_MATH, which is TF32 for f32 data on Ampere and later). f16 and bf16
convolutions use tensor cores (CUDNN_TENSOR_OP_MATH), accumulating in f32.

libcudnn is found, in order, in the nvidia-cudnn-cu13 / -cu12 wheel, under $CUDA_HOME /
$CUDA_PATH, and by the system loader.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Iterator, Mapping

from ...errors import InputError
from ...ir import dtypes
from ...thunks.gpu import ConvCall, ConvLaunch
from ...util.env import flag
from ...util.log import get_logger
from ...util.record import dataclass
from .conv_check import (  # noqa: F401  (out_size, filter_strides: re-exported)
    check_conv,
    filter_strides,
    out_size,
    packed_filter_strides,
)
from .cublas import PRECISION_HIGH
from .vendor import Switch, library_candidates, load_first, newest_first, precisions
from .vendor import wheel_dirs as vendor_wheel_dirs

CONV_ENV = "HLOC_CUDA_CONV"
DETERMINISTIC_ENV = "HLOC_CUDA_DETERMINISTIC"
CONV_MODES = ("auto", "kernel", "cudnn")

# cuDNN enum values (cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h of cuDNN 9; unchanged since 8).
CUDNN_STATUS_SUCCESS = 0
CUDNN_STATUS_NOT_SUPPORTED = 3000
CUDNN_DATA_TYPE = {"f32": 0, "f16": 2, "bf16": 9}  # FLOAT, HALF, BFLOAT16
CUDNN_DATA_FLOAT = 0
CUDNN_TENSOR_FORMAT = {"NCHW": 0, "NHWC": 1}
CUDNN_CONVOLUTION, CUDNN_CROSS_CORRELATION = 0, 1
CUDNN_MODE = {"convolution": CUDNN_CONVOLUTION, "cross_correlation": CUDNN_CROSS_CORRELATION}
CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_FMA_MATH = 0, 1, 3
CUDNN_DETERMINISTIC = 1  # cudnnDeterminism_t (CUDNN_NON_DETERMINISTIC = 0)
# cudnnConvolutionFwdAlgo_t: 0 IMPLICIT_GEMM, 1 IMPLICIT_PRECOMP_GEMM, 2 GEMM, 3 DIRECT, 4 FFT,
# 5 FFT_TILING, 6 WINOGRAD, 7 WINOGRAD_NONFUSED. The FFT-based ones round differently enough
# from a direct sum to fail f32 comparisons on large windows: never chosen.
ALGORITHMS = {0: "implicit-gemm", 1: "implicit-precomp-gemm", 2: "gemm", 3: "direct",
              6: "winograd"}
# cudnnConvolutionBwdDataAlgo_t: 0 ALGO_0, 1 ALGO_1, 2 FFT, 3 FFT_TILING, 4 WINOGRAD,
# 5 WINOGRAD_NONFUSED; cudnnConvolutionBwdFilterAlgo_t: 0 ALGO_0, 1 ALGO_1, 2 FFT, 3 ALGO_3,
# 4 WINOGRAD, 5 WINOGRAD_NONFUSED, 6 FFT_TILING. No FFTs (as forward); ALGO_0 and ALGO_3 sum
# with atomics, which the perf results' determinism field rules out (every direction's
# choice must be deterministic: the same bits run to run).
BWD_DATA_ALGORITHMS = {0: "algo-0", 1: "algo-1", 4: "winograd"}
BWD_FILTER_ALGORITHMS = {0: "algo-0", 1: "algo-1", 3: "algo-3"}


@dataclass(frozen=True)
class Direction:
    """One ConvCall direction in the legacy API: its entry points, the algorithms it may
    choose, and the descriptor roles in the order its calls take them (two read tensors,
    then the written one)."""

    run: str
    max_count: str
    heuristic: str
    workspace: str
    algorithms: Mapping[int, str]
    roles: tuple[str, str, str]


DIRECTIONS = {
    "forward": Direction("cudnnConvolutionForward", "cudnnGetConvolutionForwardAlgorithmMaxCount",
                         "cudnnGetConvolutionForwardAlgorithm_v7",
                         "cudnnGetConvolutionForwardWorkspaceSize", ALGORITHMS, ("x", "w", "y")),
    "backward_data": Direction(
        "cudnnConvolutionBackwardData", "cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
        "cudnnGetConvolutionBackwardDataAlgorithm_v7",
        "cudnnGetConvolutionBackwardDataWorkspaceSize", BWD_DATA_ALGORITHMS, ("w", "y", "x")),
    "backward_filter": Direction(
        "cudnnConvolutionBackwardFilter", "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount",
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
        "cudnnGetConvolutionBackwardFilterWorkspaceSize", BWD_FILTER_ALGORITHMS,
        ("x", "y", "w")),
}
WORKSPACE_LIMIT = 1 << 28  # bytes per convolution (and stream)
log = get_logger(__name__)
_SYSTEM_NAMES = ("libcudnn.so.9", "libcudnn.so.8", "libcudnn.so")
# libcudnn.so.9's sub-libraries, dependencies first (cuDNN 8 has ops_infer/cnn_infer...).
_SUBLIBRARIES = ("libcudnn_graph", "libcudnn_engines_precompiled",
                 "libcudnn_engines_runtime_compiled", "libcudnn_heuristic", "libcudnn_ops",
                 "libcudnn_cnn", "libcudnn_ops_infer", "libcudnn_ops_train",
                 "libcudnn_cnn_infer", "libcudnn_cnn_train")
_warned: set[str] = set()


CONV = Switch(CONV_ENV, "cudnn", "cuDNN", "hloc's convolution kernels")
conv_mode = CONV.mode  # HLOC_CUDA_CONV as "auto", "kernel" or "cudnn"
use_cudnn = CONV.forced  # the emulator's switch for its host stand-in


def warn_once(message: str) -> None:
    """One logging warning per distinct message and process."""
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


def warn_refused(refused: list[str]) -> None:
    """One warning naming the convolutions cuDNN refused at setup (their kernels run)."""
    if refused:
        warn_once(f"cuDNN refused {len(refused)} convolution(s), hloc's kernel runs them: "
                  + "; ".join(refused[:3]) + (" ..." if len(refused) > 3 else ""))


def deterministic(env: Mapping[str, str] = os.environ) -> bool:
    """Whether cuDNN may only use deterministic algorithms (HLOC_CUDA_DETERMINISTIC, default 1:
    every run gives the same bits). 0 allows the others too, as XLA's GPU back end does unless
    --xla_gpu_deterministic_ops: the fast weight-gradient algorithms sum with atomics."""
    return flag(env, DETERMINISTIC_ENV)


def runs_in_auto(call: ConvCall, only_deterministic: bool) -> bool:
    """Whether HLOC_CUDA_CONV=auto gives `call` to cuDNN (else hloc's kernel runs it).

    Forward calls: always. Backward calls only where cuDNN measured faster than hloc's
    kernels: on an H200 (cuDNN 9, full f32) the CNN training step's weight gradients took
    0.17-0.72 ms with cuDNN's deterministic algorithms (the only ones with NHWC activations:
    algorithm 1) against 0.04-0.13 ms in hloc's conv.core kernels, but 0.06 ms with the
    non-deterministic algorithm 0; its transposed convolution took 0.20 ms with NHWC
    activations (hloc: 0.11) and 0.08 ms with NCHW ones. So backward filter runs on cuDNN
    when non-deterministic algorithms are allowed, backward data when, in addition, its
    activations are NCHW-like (an NCHW filter: conv_check.filter_format). HLOC_CUDA_CONV=cudnn gives cuDNN every described call."""
    if call.direction == "forward":
        return True
    if only_deterministic:
        return False
    return call.direction == "backward_filter" or call.w_format == "NCHW"


def select_conv(mode: str, has_descriptors: bool, make: Callable):
    """The DNN engine for `--device cuda` (vendor.Switch.select): cuDNN when it sets up in
    `auto` (else hloc's kernels, one warning), always with `cudnn`, never with `kernel`."""
    return CONV.select(mode, has_descriptors, make, warn_once)


def conv_precisions(module) -> dict:
    """{thunk name: the PrecisionConfig of its convolution} (vendor.precisions)."""
    return precisions(module, "convolution")


def math_type(call: ConvCall, precision, tf32: bool) -> int:
    """The cudnnMathType_t for `call`: f16/bf16 on tensor cores; f32 in full f32 (FMA) unless
    TF32 is on and every operand precision is at most HIGH (XLA's rule)."""
    if call.dtype != "f32":
        return CUDNN_TENSOR_OP_MATH
    levels = precision.operand_precision if precision is not None else ()
    if tf32 and max(levels, default=0) <= PRECISION_HIGH:
        return CUDNN_TENSOR_OP_MATH
    return CUDNN_FMA_MATH


# ---- finding libcudnn ---------------------------------------------------------------------------

def candidates(env: Mapping[str, str] = os.environ,
               wheel_dirs: Callable[[], list[str]] = vendor_wheel_dirs) -> Iterator[str]:
    """Paths (or loader names) to try, best first."""
    return library_candidates("libcudnn.so.*", ("cudnn/lib", "cu13/lib", "cu12/lib"),
                              ("CUDA_HOME", "CUDA_PATH", "CUDNN_HOME"), "cudnn", _SYSTEM_NAMES,
                              env, wheel_dirs)


def _open_global(path: str):
    return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def _preload(directory: str, loader: Callable) -> list:
    """The sub-libraries next to libcudnn.so.N, loaded first so that the dispatcher's dlopen
    by soname finds them already in the process (a wheel's directory is on no search path)."""
    loaded = []
    for base in _SUBLIBRARIES:
        for path in newest_first(os.path.join(directory, base + ".so.*"))[:1]:
            try:
                loaded.append(loader(path))
            except OSError as e:  # e.g. runtime-compiled engines without libnvrtc: optional
                log.debug("cuDNN sub-library %s not loaded: %s", path, e)
    return loaded


class CudnnLibrary:
    """libcudnn's dispatcher plus the sub-libraries preloaded from its directory; `fn(name)`
    finds a symbol in the first of them that exports it."""

    def __init__(self, main, subs=()):
        self.main = main
        self.libs = [main, *reversed(subs)]

    def fn(self, name: str):
        for lib in self.libs:
            f = getattr(lib, name, None)
            if f is not None:
                return f
        raise AttributeError(name)

    def has(self, name: str) -> bool:
        try:
            self.fn(name)
        except AttributeError:
            return False
        return True


def load_cudnn(env: Mapping[str, str] = os.environ, loader: Callable = _open_global,
               wheel_dirs: Callable[[], list[str]] = vendor_wheel_dirs) -> CudnnLibrary:
    """The first libcudnn that loads and has the legacy convolution API; CudaError if none."""
    def open_lib(path: str) -> CudnnLibrary:
        subs = _preload(os.path.dirname(path), loader) if os.sep in path else []
        return CudnnLibrary(loader(path), subs)

    return load_first(candidates(env, wheel_dirs), open_lib,
                      lambda lib: lib.has("cudnnConvolutionForward") and lib.has("cudnnCreate"),
                      "cudnnConvolutionForward", "libcudnn", "nvidia-cudnn-cu13", CONV)


# ---- cuDNN --------------------------------------------------------------------------------------

class _AlgoPerf(ctypes.Structure):
    """cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionBwdDataAlgoPerf_t and
    cudnnConvolutionBwdFilterAlgoPerf_t (one layout: the algo enum, status, time, memory,
    determinism, math type, 3 reserved ints)."""

    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int),
                ("mathType", ctypes.c_int), ("reserved", ctypes.c_int * 3)]


_VP, _INT, _SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_PVP, _PINT = ctypes.POINTER(_VP), ctypes.POINTER(_INT)
# name: (restype, argtypes), as cudnn_graph.h / cudnn_ops.h / cudnn_cnn.h declare them.
PROTOTYPES = {
    "cudnnGetVersion": (_SIZE, []),
    "cudnnGetErrorString": (ctypes.c_char_p, [_INT]),
    "cudnnCreate": (_INT, [_PVP]),
    "cudnnSetStream": (_INT, [_VP, _VP]),
    "cudnnCreateTensorDescriptor": (_INT, [_PVP]),
    "cudnnSetTensorNdDescriptor": (_INT, [_VP, _INT, _INT, _PINT, _PINT]),
    "cudnnDestroyTensorDescriptor": (_INT, [_VP]),
    "cudnnCreateFilterDescriptor": (_INT, [_PVP]),
    "cudnnSetFilterNdDescriptor": (_INT, [_VP, _INT, _INT, _INT, _PINT]),
    "cudnnDestroyFilterDescriptor": (_INT, [_VP]),
    "cudnnCreateConvolutionDescriptor": (_INT, [_PVP]),
    "cudnnSetConvolutionNdDescriptor": (_INT, [_VP, _INT, _PINT, _PINT, _PINT, _INT, _INT]),
    "cudnnSetConvolutionGroupCount": (_INT, [_VP, _INT]),
    "cudnnSetConvolutionMathType": (_INT, [_VP, _INT]),
    "cudnnDestroyConvolutionDescriptor": (_INT, [_VP]),
    "cudnnGetConvolutionNdForwardOutputDim": (_INT, [_VP, _VP, _VP, _INT, _PINT]),
    "cudnnGetConvolutionForwardAlgorithmMaxCount": (_INT, [_VP, _PINT]),
    "cudnnGetConvolutionForwardAlgorithm_v7": (
        _INT, [_VP, _VP, _VP, _VP, _VP, _INT, _PINT, ctypes.POINTER(_AlgoPerf)]),
    "cudnnGetConvolutionForwardWorkspaceSize": (
        _INT, [_VP, _VP, _VP, _VP, _VP, _INT, ctypes.POINTER(_SIZE)]),
    "cudnnConvolutionForward": (
        _INT, [_VP, _VP, _VP, _VP, _VP, _VP, _VP, _INT, _VP, _SIZE, _VP, _VP, _VP]),
    # (handle, w desc, dy desc, conv, dx desc, ...) and (handle, x desc, dy desc, conv, dw
    # desc, ...); the calls: (handle, alpha, w desc, w, dy desc, dy, conv, algo, workspace,
    # its size, beta, dx desc, dx) and (..., x desc, x, dy desc, dy, ..., dw desc, dw).
    "cudnnGetConvolutionBackwardDataAlgorithmMaxCount": (_INT, [_VP, _PINT]),
    "cudnnGetConvolutionBackwardDataAlgorithm_v7": (
        _INT, [_VP, _VP, _VP, _VP, _VP, _INT, _PINT, ctypes.POINTER(_AlgoPerf)]),
    "cudnnGetConvolutionBackwardDataWorkspaceSize": (
        _INT, [_VP, _VP, _VP, _VP, _VP, _INT, ctypes.POINTER(_SIZE)]),
    "cudnnConvolutionBackwardData": (
        _INT, [_VP, _VP, _VP, _VP, _VP, _VP, _VP, _INT, _VP, _SIZE, _VP, _VP, _VP]),
    "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount": (_INT, [_VP, _PINT]),
    "cudnnGetConvolutionBackwardFilterAlgorithm_v7": (
        _INT, [_VP, _VP, _VP, _VP, _VP, _INT, _PINT, ctypes.POINTER(_AlgoPerf)]),
    "cudnnGetConvolutionBackwardFilterWorkspaceSize": (
        _INT, [_VP, _VP, _VP, _VP, _VP, _INT, ctypes.POINTER(_SIZE)]),
    "cudnnConvolutionBackwardFilter": (
        _INT, [_VP, _VP, _VP, _VP, _VP, _VP, _VP, _INT, _VP, _SIZE, _VP, _VP, _VP]),
    # cudnn_ops: converts a filter in any layout to packed K, C, spatial (ConvCall.w_strides).
    "cudnnTransformTensor": (_INT, [_VP, _VP, _VP, _VP, _VP, _VP, _VP]),
}
# Without these a library still runs the descriptors that do not need them.
OPTIONAL = frozenset({"cudnnTransformTensor"} | {
    name for d in ("backward_data", "backward_filter") for name in (
        DIRECTIONS[d].run, DIRECTIONS[d].max_count, DIRECTIONS[d].heuristic,
        DIRECTIONS[d].workspace)})
ALIGN = 256  # bytes: the workspace and the converted filter within a stream's slot


def _bind(lib: CudnnLibrary) -> dict:
    from .driver import CudaError

    out = {}
    for name, (restype, argtypes) in PROTOTYPES.items():
        try:
            fn = lib.fn(name)
        except AttributeError:
            if name in OPTIONAL:
                continue
            raise CudaError(f"libcudnn has no {name}") from None
        fn.restype, fn.argtypes = restype, argtypes
        out[name] = fn
    return out


def _ints_array(values) -> ctypes.Array:
    return (_INT * len(values))(*values)


class _Refused(Exception):
    """cuDNN cannot run one descriptor (the thunk keeps hloc's kernel)."""


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class _Plan:
    """One convolution's descriptors, algorithm and workspace size; for a filter that is
    converted first, the tensor descriptors of its layout (`w_from`) and of the packed copy
    (`w_to`), which lies `filter_offset` bytes into the stream's workspace slot."""

    def __init__(self):
        self.x = _VP()
        self.w = _VP()
        self.y = _VP()
        self.conv = _VP()
        self.algo = 0
        self.math = CUDNN_FMA_MATH
        self.workspace = 0
        self.w_from: _VP | None = None
        self.w_to: _VP | None = None
        self.filter_bytes = 0

    @property
    def filter_offset(self) -> int:
        return _aligned(self.workspace)

    @property
    def slot(self) -> int:
        """Bytes of a stream's workspace slot this convolution needs."""
        if self.w_to is None:
            return self.workspace
        return self.filter_offset + self.filter_bytes


class CudnnConv:
    """Runs ConvCall descriptors with cuDNN on a CudaDevice: one handle, every described
    convolution of `program` set up once (descriptors, algorithm, one workspace).

    `precisions` ({thunk name: PrecisionConfig}) and `tf32` pick each call's math type
    (`math_type`). `runs(name)` says whether a thunk's convolution was set up; the others
    keep hloc's kernel."""

    def __init__(self, device, program, lib=None, precisions=None, tf32: bool = False,
                 only_deterministic: bool = True, auto: bool = False):
        from .driver import CudaError

        self.lib = lib if lib is not None else load_cudnn()
        self.f = _bind(self.lib)
        self.device = device
        self.handle = _VP()
        status = self.f["cudnnCreate"](ctypes.byref(self.handle))
        if status != CUDNN_STATUS_SUCCESS:
            raise CudaError(f"cudnnCreate failed ({self._why(status)})")
        self.bound_stream: int | None = None
        self.plans: dict[str, _Plan] = {}
        self.only_deterministic = only_deterministic
        self.auto = auto
        self._set_up(program, precisions or {}, tf32)
        self.streams = program.streams.num_streams if program.streams else 1
        self.slot = _aligned(max((p.slot for p in self.plans.values()), default=0))
        self.workspace = device.allocate(self.slot * self.streams) if self.slot else 0

    def _set_up(self, program, precisions, tf32: bool) -> None:
        refused = []
        for t in program.walk():
            if not isinstance(t, ConvLaunch) or t.dnn is None or t.name in self.plans:
                continue
            if self.auto and not runs_in_auto(t.dnn, self.only_deterministic):
                continue
            try:
                check_conv(t.dnn, t.name)
                self.plans[t.name] = self._plan(t.dnn, math_type(t.dnn, precisions.get(t.name),
                                                                 tf32))
            except (_Refused, InputError) as e:
                refused.append(f"%{t.name} ({e})")
        warn_refused(refused)

    def _why(self, status: int) -> str:
        try:
            text = self.f["cudnnGetErrorString"](status)
        except Exception:  # the message is a courtesy; the status code is the fact
            text = None
        return f"cuDNN status {status}" + (f": {text.decode()}" if text else "")

    def _ok(self, status: int, what: str) -> None:
        if status != CUDNN_STATUS_SUCCESS:
            raise _Refused(f"{what}: {self._why(status)}")

    def _plan(self, call: ConvCall, math: int) -> _Plan:
        f, p = self.f, _Plan()
        dt = CUDNN_DATA_TYPE[call.dtype]
        for desc, create in ((p.x, "cudnnCreateTensorDescriptor"),
                             (p.y, "cudnnCreateTensorDescriptor"),
                             (p.w, "cudnnCreateFilterDescriptor"),
                             (p.conv, "cudnnCreateConvolutionDescriptor")):
            self._ok(f[create](ctypes.byref(desc)), create)
        nd = len(call.x_dims)
        for desc, dims, steps in ((p.x, call.x_dims, call.x_strides),
                                  (p.y, call.y_dims, call.y_strides)):
            self._ok(f["cudnnSetTensorNdDescriptor"](desc, dt, nd, _ints_array(dims),
                                                     _ints_array(steps)),
                     "cudnnSetTensorNdDescriptor")
        self._ok(f["cudnnSetFilterNdDescriptor"](p.w, dt, CUDNN_TENSOR_FORMAT[call.w_format],
                                                 nd, _ints_array(call.w_dims)),
                 "cudnnSetFilterNdDescriptor")
        self._ok(f["cudnnSetConvolutionNdDescriptor"](
            p.conv, nd - 2, _ints_array(call.padding), _ints_array(call.window_strides),
            _ints_array(call.dilation), CUDNN_MODE[call.mode], CUDNN_DATA_FLOAT),
            "cudnnSetConvolutionNdDescriptor")
        self._ok(f["cudnnSetConvolutionGroupCount"](p.conv, call.groups),
                 "cudnnSetConvolutionGroupCount")
        self._ok(f["cudnnSetConvolutionMathType"](p.conv, math), "cudnnSetConvolutionMathType")
        out = (_INT * nd)()
        self._ok(f["cudnnGetConvolutionNdForwardOutputDim"](p.conv, p.x, p.w, nd, out),
                 "cudnnGetConvolutionNdForwardOutputDim")
        if tuple(out) != call.y_dims:
            raise _Refused(f"cuDNN's output dims {tuple(out)} are not {call.y_dims}")
        self._algorithm(p, math, DIRECTIONS[call.direction])
        if call.w_strides:
            self._transform(p, call, dt)
        return p

    def _transform(self, p: _Plan, call: ConvCall, dt: int) -> None:
        """Tensor descriptors converting the filter from its strides to packed in the filter
        descriptor's format (packed_filter_strides) with cudnnTransformTensor."""
        if "cudnnTransformTensor" not in self.f:
            raise _Refused("this libcudnn has no cudnnTransformTensor (the filter needs "
                           "converting)")
        p.w_from, p.w_to = _VP(), _VP()
        nd = len(call.w_dims)
        for desc, steps in ((p.w_from, call.w_strides), (p.w_to, packed_filter_strides(call))):
            self._ok(self.f["cudnnCreateTensorDescriptor"](ctypes.byref(desc)),
                     "cudnnCreateTensorDescriptor")
            self._ok(self.f["cudnnSetTensorNdDescriptor"](desc, dt, nd,
                                                          _ints_array(call.w_dims),
                                                          _ints_array(steps)),
                     "cudnnSetTensorNdDescriptor (filter)")
        count = 1
        for d in call.w_dims:
            count *= d
        p.filter_bytes = count * dtypes.info(dtypes.from_name(call.dtype)).byte_size

    def _algorithm(self, p: _Plan, math: int, api: Direction) -> None:
        """The first algorithm of cuDNN's heuristic order for the call's direction that is
        supported, deterministic (unless HLOC_CUDA_DETERMINISTIC=0), not FFT-based, keeps
        full f32 when asked (FMA) and needs at most WORKSPACE_LIMIT bytes."""
        if any(name not in self.f for name in (api.run, api.max_count, api.heuristic,
                                               api.workspace)):
            raise _Refused(f"this libcudnn has no {api.run}")
        f, h = self.f, self.handle
        descs = [getattr(p, role) for role in api.roles]
        count = _INT(0)
        self._ok(f[api.max_count](h, ctypes.byref(count)), api.max_count)
        n = min(max(count.value, 1), 64)
        perfs, got = (_AlgoPerf * n)(), _INT(0)
        self._ok(f[api.heuristic](h, descs[0], descs[1], p.conv, descs[2], n,
                                  ctypes.byref(got), perfs), api.heuristic)
        for perf in perfs[:max(0, min(got.value, n))]:
            if (perf.status != CUDNN_STATUS_SUCCESS or perf.algo not in api.algorithms
                    or (self.only_deterministic and perf.determinism != CUDNN_DETERMINISTIC)
                    or perf.memory > WORKSPACE_LIMIT
                    or (math == CUDNN_FMA_MATH and perf.mathType != CUDNN_FMA_MATH)):
                continue
            if f["cudnnSetConvolutionMathType"](p.conv, perf.mathType) != CUDNN_STATUS_SUCCESS:
                continue
            size = _SIZE(0)
            if f[api.workspace](h, descs[0], descs[1], p.conv, descs[2], perf.algo,
                                ctypes.byref(size)) != 0:
                continue
            if size.value <= WORKSPACE_LIMIT:
                p.algo, p.math, p.workspace = perf.algo, perf.mathType, size.value
                return
        kind = "deterministic " if self.only_deterministic else ""
        raise _Refused(f"no supported {kind}algorithm among {got.value} "
                       f"(math type {math})")

    def runs(self, name: str) -> bool:
        return name in self.plans

    def _bind_stream(self) -> None:
        stream = self.device.stream_handle()
        if stream != self.bound_stream:
            self._call(self.f["cudnnSetStream"](self.handle, _VP(stream)), "cudnnSetStream")
            self.bound_stream = stream

    def _call(self, status: int, what: str) -> None:
        from .driver import CudaError

        if status != CUDNN_STATUS_SUCCESS:
            raise CudaError(f"{what} failed ({self._why(status)})")

    def __call__(self, call: ConvCall, name: str) -> None:
        p = self.plans[name]
        api = DIRECTIONS[call.direction]
        self._bind_stream()
        base = self.workspace + (getattr(self.device, "stream", 0) % self.streams) * self.slot
        space = _VP(base) if p.workspace else _VP()
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        ptrs = {label: _VP(self.device.address(getattr(call, label))) for label in "xwy"}
        if p.w_to is not None:  # the filter, packed in its format, after the workspace
            packed = _VP(base + p.filter_offset)
            self._call(self.f["cudnnTransformTensor"](
                self.handle, ctypes.byref(alpha), p.w_from, ptrs["w"], ctypes.byref(beta),
                p.w_to, packed), f"cudnnTransformTensor for %{name}")
            ptrs["w"] = packed
        (a, b, out) = api.roles
        self._call(self.f[api.run](
            self.handle, ctypes.byref(alpha), getattr(p, a), ptrs[a], getattr(p, b), ptrs[b],
            p.conv, p.algo, space, p.workspace, ctypes.byref(beta), getattr(p, out),
            ptrs[out]), f"{api.run} for %{name}")
