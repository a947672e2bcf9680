"""The GPU thunk schedule: what the CUDA runtime (and its emulator) executes.

Built from the target-neutral thunk program (hloc.thunks) by mapping every thunk to GPU work:
kernels (with launch dimensions, shared memory and argument slices), Gemm (the tiled GEMM
kernel), device copies and memsets, While (the predicate is copied to the host after the
condition, or a known trip count runs as a host loop), Conditional (the selector is copied
to the host), Sequential, and HostCompute for the few ops without a GPU kernel (LAPACK
custom-calls, FFTs above the kernel's size bound): their operands go to the host, the
reference implementation runs there and the results come back.

Three programs: host-to-device (parameter uploads, constants uploaded once per executable),
main (the thunks, on the streams of hloc.schedule.streams with events for cross-stream
dependencies; nested sequences run on their parent's stream), device-to-host (results).
The top-level `main` sequence is parallel to the target-neutral one, so stream assignments
index both; a thunk that needs several launches becomes a Sequential.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from ...buffers.assignment import Allocation, Slice
from ...thunks.thunks import StreamAssignment
from .kernel import KernelRecipe

Slices = tuple[Slice, ...]


@dataclass(frozen=True)
class GpuThunk:
    """Base class: `name` is the HLO instruction the thunk executes."""

    kind: ClassVar[str] = ""
    name: str


@dataclass(frozen=True)
class Kernel(GpuThunk):
    """A kernel launch."""

    kind: ClassVar[str] = "kernel"
    kernel: str
    variant: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: Slices


@dataclass(frozen=True)
class BlasCall:
    """A plain dot as one column-major strided-batched BLAS call (cublasGemmStridedBatchedEx):

        C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i],  i < batch,

    op(A) m x k, op(B) k x n, C m x n; element (r, c) of a column-major matrix X[i] is at
    element offset i * stride_x + r + c * ldx of its slice, op is "N" (as stored) or "T"
    (transposed). HLO arrays are usually row-major, and a row-major matrix is the column-major
    storage of its transpose, so a row-major dot out = lhs @ rhs runs as out^T = rhs^T lhs^T:
    A is then the HLO rhs and B the lhs (`swapped`). Types are IR dtype names; `compute` is
    the accumulation type (f32 for f16/bf16/f32, f64 for f64), which alpha and beta have.
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

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("a", "b", "c"):
            out[key] = out[key].to_json()
        return out

    @staticmethod
    def from_json(d: dict) -> BlasCall:
        values = {f.name: d[f.name] for f in fields(BlasCall)}
        for key in ("a", "b", "c"):
            values[key] = Slice(*values[key])
        return BlasCall(**values)

    def text(self) -> str:
        order = "out^T=rhs^T*lhs^T" if self.swapped else "out=lhs*rhs"
        types = f"{self.a_type}" + (f"->{self.c_type}" if self.c_type != self.a_type else "")
        return (f"blas[{self.transa}{self.transb} {order} m={self.m} n={self.n} k={self.k} "
                f"ld={self.lda}/{self.ldb}/{self.ldc} batch={self.batch} "
                f"strides={self.stride_a}/{self.stride_b}/{self.stride_c} {types}]")


@dataclass(frozen=True)
class Gemm(Kernel):
    """A launch of the tiled GEMM kernel: out[b] = lhs[b] x rhs[b] (m x k times k x n).

    `blas` (plain dots only: no fused prologue or epilogue, layouts a BLAS call can express)
    describes the same product for cuBLAS, which HLOC_CUDA_GEMM=cublas selects at run time."""

    kind: ClassVar[str] = "gemm"
    batch: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    blas: BlasCall | None = None


@dataclass(frozen=True)
class Copy(GpuThunk):
    kind: ClassVar[str] = "copy"
    source: Slice
    destination: Slice


@dataclass(frozen=True)
class Memset(GpuThunk):
    kind: ClassVar[str] = "memset"
    destination: Slice
    byte: int = 0


@dataclass(frozen=True)
class While(GpuThunk):
    """condition; copy the pred to the host; body; ... (or `trip_count` body runs)."""

    kind: ClassVar[str] = "while"
    condition: tuple[GpuThunk, ...]
    body: tuple[GpuThunk, ...]
    predicate: Slice
    trip_count: int | None = None


@dataclass(frozen=True)
class Conditional(GpuThunk):
    kind: ClassVar[str] = "conditional"
    selector: Slice
    branches: tuple[tuple[GpuThunk, ...], ...]
    selector_is_pred: bool = False


@dataclass(frozen=True)
class Sequential(GpuThunk):
    kind: ClassVar[str] = "sequential"
    thunks: tuple[GpuThunk, ...]


@dataclass(frozen=True)
class HostCompute(GpuThunk):
    """Run HLO instruction `name` on the host (reference implementation) between transfers."""

    kind: ClassVar[str] = "host"
    opcode: str
    operands: Slices
    outputs: Slices


GPU_THUNK_KINDS: dict[str, type[GpuThunk]] = {
    cls.kind: cls for cls in (Kernel, Gemm, Copy, Memset, While, Conditional, Sequential,
                              HostCompute)}


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
    main: tuple[GpuThunk, ...]
    device_to_host: tuple[Download, ...]
    kernels: tuple[KernelRecipe, ...]
    streams: StreamAssignment | None = None
    notes: tuple[str, ...] = ()
    kernel_ir_sha256: tuple[tuple[str, str], ...] = ()  # (kernel, sha256 of its IR text)

    def walk(self):
        """Every thunk, nested ones included, depth-first."""
        from ...thunks.thunks import walk_thunks

        return walk_thunks(self.main, nested)

    def kind_counts(self) -> dict[str, int]:
        from ...thunks.thunks import count_kinds

        return count_kinds(self.walk())


def nested(thunk: GpuThunk):
    if isinstance(thunk, While):
        yield from thunk.condition
        yield from thunk.body
    elif isinstance(thunk, Conditional):
        for branch in thunk.branches:
            yield from branch
    elif isinstance(thunk, Sequential):
        yield from thunk.thunks
