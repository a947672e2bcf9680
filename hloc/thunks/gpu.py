"""The GPU program: what the CUDA runtime (and its emulator) executes.

Built from the target-neutral thunk program (hloc.codegen.cuda.build) by mapping every thunk
to GPU work. It reuses Copy, Memset, While, Conditional and Sequential from thunks.py (While
copies its predicate to the host after the condition, or a known trip count runs as a host
loop; Conditional copies its selector to the host) and adds four leaf kinds: Launch (a
kernel, with launch dimensions, shared memory and argument slices), GemmLaunch (the tiled
GEMM kernel, optionally with a cuBLAS form), ConvLaunch (a kernel computing a convolution,
optionally with a cuDNN form) and HostCompute for the few ops without a GPU
kernel (LAPACK custom-calls, FFTs above the kernel's size bound): their operands go to the
host, the reference implementation runs there and the results come back.

Three programs: host-to-device (parameter uploads, constants uploaded once per executable),
main (the thunks, on the streams of hloc.schedule.streams with events for cross-stream
dependencies; nested sequences run on their parent's stream), device-to-host (results).
The top-level `main` sequence is parallel to the target-neutral one, so stream assignments
index both; a thunk that needs several launches becomes a Sequential.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from ..buffers.assignment import Allocation, Slice
from ..util.record import dataclass
from .base import Slices, Thunk, ThunkKind, kind_counts, walk
from .collectives import MULTI_DEVICE_KINDS
from .thunks import Conditional, Copy, Memset, Sequential, StreamAssignment, While


@dataclass(frozen=True)
class KernelRecipe:
    """What to emit for one kernel (hloc.codegen.cuda.kernel): plain data, JSON in the bundle.

    The same recipe always emits the same IR, which is how `--device cuda-emulated` rebuilds
    exactly the bundled kernels."""

    name: str
    variant: str
    instruction: str
    items: tuple[int, ...] = (0,)
    params: tuple[tuple[str, int], ...] = ()
    block_threads: int = 256
    scratch_bytes: int = 0

    def param(self, key: str, default: int | None = None) -> int:
        for k, v in self.params:
            if k == key:
                return v
        if default is None:
            raise KeyError(f"kernel {self.name}: recipe has no parameter '{key}'")
        return default

    def to_json(self) -> dict:
        return {"name": self.name, "variant": self.variant, "instruction": self.instruction,
                "items": list(self.items), "params": {k: v for k, v in self.params},
                "block_threads": self.block_threads, "scratch_bytes": self.scratch_bytes}

    @staticmethod
    def from_json(d: dict) -> KernelRecipe:
        return KernelRecipe(d["name"], d["variant"], d["instruction"], tuple(d["items"]),
                            tuple(sorted((k, int(v)) for k, v in d["params"].items())),
                            int(d["block_threads"]), int(d.get("scratch_bytes", 0)))


@dataclass(frozen=True)
class BlasCall:
    """A plain dot as one column-major strided-batched BLAS call (cublasGemmStridedBatchedEx):

        C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i],  i < batch,

    op(A) m x k, op(B) k x n, C m x n; element (r, c) of a column-major matrix X[i] is at
    element offset i * stride_x + r + c * ldx of its slice, op is "N" (as stored) or "T"
    (transposed). HLO arrays are usually row-major, and a row-major dot out = lhs @ rhs runs as
    out^T = rhs^T lhs^T: A is then the HLO rhs and B the lhs (`swapped`). Types are IR dtype
    names; `compute` is the accumulation type (f32 for f16/bf16/f32, f64 for f64), which alpha
    and beta have.
    """

    a: Slice
    b: Slice
    c: Slice
    a_type: str
    b_type: str
    c_type: str
    compute: str
    transa: str
    transb: str
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    batch: int = 1
    stride_a: int = 0
    stride_b: int = 0
    stride_c: int = 0
    alpha: float = 1.0
    beta: float = 0.0
    swapped: bool = False

    def text(self) -> str:
        order = "out^T=rhs^T*lhs^T" if self.swapped else "out=lhs*rhs"
        types = f"{self.a_type}" + (f"->{self.c_type}" if self.c_type != self.a_type else "")
        return (f"blas[{self.transa}{self.transb} {order} m={self.m} n={self.n} k={self.k} "
                f"ld={self.lda}/{self.ldb}/{self.ldc} batch={self.batch} "
                f"strides={self.stride_a}/{self.stride_b}/{self.stride_c} {types}]")


DNN_DIRECTIONS = ("forward", "backward_data", "backward_filter")
DNN_MODES = ("cross_correlation", "convolution")


@dataclass(frozen=True)
class ConvCall:
    """A convolution as one call of cuDNN's legacy API: `direction` says which of the three
    that compute with a forward convolution's descriptors (x, w, y and the window below):

    - "forward", cudnnConvolutionForward: reads x and w, writes y;
    - "backward_data", cudnnConvolutionBackwardData: reads y (dy) and w, writes x (dx), the
      transpose of the forward map: dx[n, c, i] = sum of dy[n, k, o] * w[k, c, r] over every
      o, r with o*stride + r*dilation - padding = i (an HLO lhs-dilated convolution);
    - "backward_filter", cudnnConvolutionBackwardFilter: reads x and y (dy), writes w (dw):
      dw[k, c, r] = sum over n, o of x[n, c, o*stride + r*dilation - padding] * dy[n, k, o]
      (an HLO weight-gradient convolution). w is then written packed in `w_format` (NHWC,
      K, spatial, C, for NHWC-strided activations), never through `w_strides`.

    `mode` "cross_correlation" (CUDNN_CROSS_CORRELATION) is the formula below as written;
    "convolution" (CUDNN_CONVOLUTION) reads the filter's taps reversed in every spatial dim
    (w[k, c, R-1-r]), which is how an HLO kernel reversal is absorbed. The forward formula:

        y[n, k, o...] = sum over c < C/groups and taps r...:
                        x[n, g*C/groups + c, o*stride + r*dilation - padding] * w[k, c, r...]

    with g = k // (K/groups) and x zero outside its spatial extent. Tensors are in cuDNN's
    semantic order, N (batch), C (feature), then the spatial dims (2 or 3 of them: a 1-D
    convolution gets a unit spatial dim); `x_strides` and `y_strides` are element strides of
    those dims in their slices, so any physical layout of the HLO arrays is described. The
    filter `w` is K (output features) x C/groups x spatial (`w_dims` in that order whatever
    the format, as cuDNN's filter descriptor takes them), packed as `w_format` says: "NCHW"
    (K, C, spatial..., the last dim fastest) or "NHWC" (K, spatial..., C), unless `w_strides`
    is set: then the filter is in any layout (jax's HWIO, OHWI, ...), those are the element
    strides of its K, C, spatial dims in its slice, and the runtime first converts it into a
    scratch copy packed in `w_format` (cudnnTransformTensor into the cuDNN engine's
    workspace), then convolves. hloc's formats (conv_check.filter_format): NCHW for forward
    calls; for backward calls NHWC when x or dy is NHWC-strided (C stride 1), else NCHW;
    strides for read filters only (forward: into NCHW; backward data). Padding is the same
    on both sides of each spatial dim (cuDNN's only form). `dtype` is x's, w's and y's element
    type (IR name), `compute` the accumulation type (f32). What hloc hands to cuDNN this way:
    plain forward convolutions and the convolution cores of fused ones, transposed (lhs-
    dilated) convolutions as backward_data and weight-gradient convolutions as
    backward_filter (hloc.codegen.cuda.conv_dnn, conv_bwd).
    """

    x: Slice
    w: Slice
    y: Slice
    dtype: str
    compute: str
    x_dims: tuple[int, ...]
    x_strides: tuple[int, ...]
    w_dims: tuple[int, ...]
    w_format: str
    y_dims: tuple[int, ...]
    y_strides: tuple[int, ...]
    padding: tuple[int, ...]
    window_strides: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int = 1
    w_strides: tuple[int, ...] = ()
    direction: str = "forward"
    mode: str = "cross_correlation"

    def text(self) -> str:
        dims = lambda d: "x".join(map(str, d))  # noqa: E731
        w = f"/{dims(self.w_strides)}->" if self.w_strides else " "
        mode = " reversed" if self.mode == "convolution" else ""
        return (f"cudnn[{self.direction}{mode} x={dims(self.x_dims)}/{dims(self.x_strides)} "
                f"w={dims(self.w_dims)}"
                f"{w}{self.w_format} y={dims(self.y_dims)}/{dims(self.y_strides)} "
                f"pad={dims(self.padding)} stride={dims(self.window_strides)} "
                f"dilation={dims(self.dilation)} groups={self.groups} {self.dtype}]")


@dataclass(frozen=True)
class Launch(Thunk):
    """A kernel launch: `kernel` (a KernelRecipe's name) on `args`, the kernel ABI's buffers.
    `shared_bytes` is the shared memory the kernel declares (static arrays: the launch asks
    for no dynamic shared memory).

    The ABI does not say which arguments a kernel writes, so every argument counts as both
    read and written (conservative for stream and graph dependencies)."""

    kind: ClassVar[ThunkKind] = ThunkKind.KERNEL
    kernel: str
    variant: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: Slices

    def reads(self) -> Slices:
        return self.args

    def writes(self) -> Slices:
        return self.args


@dataclass(frozen=True)
class GemmLaunch(Launch):
    """A launch of the tiled GEMM kernel: out[b] = lhs[b] x rhs[b] (m x k times k x n).

    `blas` (plain dots only: no fused prologue or epilogue, layouts a BLAS call can express)
    describes the same product for cuBLAS, which HLOC_CUDA_GEMM=cublas selects at run time."""

    kind: ClassVar[ThunkKind] = ThunkKind.GEMM
    batch: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    blas: BlasCall | None = None


@dataclass(frozen=True)
class ConvLaunch(Launch):
    """A launch of a kernel that computes a convolution (alone, or fused with producers and
    an epilogue) one output element per thread.

    `dnn` (a convolution of parameters, layouts and windows cuDNN's strided descriptors can
    express: forward, or a gradient as backward data / backward filter) describes the same
    convolution for cuDNN, which HLOC_CUDA_CONV selects at run time. Either the thunk's instruction is that plain convolution (y is its output), or the
    convolution is the core of a fusion with an elementwise epilogue: the fusion then runs as
    a Sequential of this launch (kernel `conv.core`, writing the convolution into the
    stream's scratch buffer, its last argument, which is also `dnn.y`) and a `conv.epilogue`
    kernel that reads it from there (hloc.codegen.cuda.conv_core)."""

    kind: ClassVar[ThunkKind] = ThunkKind.CONVOLUTION
    dnn: ConvCall | None = None


@dataclass(frozen=True)
class HostCompute(Thunk):
    """Run HLO instruction `name` on the host (reference implementation) between transfers."""

    kind: ClassVar[ThunkKind] = ThunkKind.HOST
    opcode: str
    operands: Slices
    outputs: Slices

    def reads(self) -> Slices:
        return self.operands

    def writes(self) -> Slices:
        return self.outputs


GPU_THUNK_KINDS: dict[ThunkKind, type[Thunk]] = {
    cls.kind: cls for cls in (Launch, GemmLaunch, ConvLaunch, Copy, Memset, While, Conditional,
                              Sequential, HostCompute)} | MULTI_DEVICE_KINDS


@dataclass(frozen=True)
class Upload:
    """Host → device: entry parameter `number` (leaf `index`) or constant `constant`."""

    slice: Slice
    number: int = -1
    index: tuple[int, ...] = ()
    constant: str = ""


@dataclass(frozen=True)
class Download:
    """Device → host: result leaf `index` of the entry root."""

    index: tuple[int, ...]
    slice: Slice


@dataclass(frozen=True)
class GpuProgram:
    """Everything the CUDA runtime needs besides the kernels' code and the HLO."""

    module: str
    allocations: tuple[Allocation, ...]
    host_to_device: tuple[Upload, ...]
    main: tuple[Thunk, ...]
    device_to_host: tuple[Download, ...]
    kernels: tuple[KernelRecipe, ...]
    streams: StreamAssignment | None = None
    notes: tuple[str, ...] = ()
    kernel_ir_sha256: tuple[tuple[str, str], ...] = ()  # (kernel, sha256 of its IR text)

    def walk(self) -> Iterator[Thunk]:
        """Every thunk, nested ones included, depth-first (base.walk for parents and depth)."""
        return (visit.thunk for visit in walk(self.main))

    def kind_counts(self) -> dict[str, int]:
        return kind_counts(self.walk())
