"""Target-neutral thunks: what runs, in what order, on which buffer slices.

Every thunk is named after the HLO instruction it executes (unique in the module), so a
runtime can find the instruction for details the thunk does not repeat. Operand and output
slices are the array leaves of the operands / result, depth-first. The base class, kinds and
walkers are in base.py; the GPU program (gpu.py) reuses Copy, Memset, While, Conditional and
Sequential.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from ..buffers.assignment import Allocation, Slice
from ..util.record import dataclass
from .base import Slices, Thunk, ThunkKind, kind_counts, walk
from .collectives import MULTI_DEVICE_KINDS


@dataclass(frozen=True)
class Kernel(Thunk):
    """A generated kernel: a fused computation (`computation`) or a single op (computation "").

    `scratch`: at most one slice of temp memory the thunk may use while it runs and that holds
    nothing before or after (buffer assignment gives it to fusions the CPU code generator
    outlines into a product and kernels around it: the product's result lives there)."""

    kind: ClassVar[ThunkKind] = ThunkKind.KERNEL
    opcode: str
    computation: str
    operands: Slices
    outputs: Slices
    scratch: Slices = ()

    def reads(self) -> Slices:
        return self.operands

    def writes(self) -> Slices:
        return self.outputs


@dataclass(frozen=True)
class Gemm(Thunk):
    """A dot: lhs x rhs -> output, contraction described by the HLO instruction."""

    kind: ClassVar[ThunkKind] = ThunkKind.GEMM
    lhs: Slice
    rhs: Slice
    output: Slice
    lhs_contracting: tuple[int, ...] = ()
    rhs_contracting: tuple[int, ...] = ()
    lhs_batch: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()

    def reads(self) -> Slices:
        return (self.lhs, self.rhs)

    def writes(self) -> Slices:
        return (self.output,)


@dataclass(frozen=True)
class Convolution(Thunk):
    """A convolution of `input` with `kernel`, described by the HLO instruction."""

    kind: ClassVar[ThunkKind] = ThunkKind.CONVOLUTION
    input: Slice
    kernel: Slice
    output: Slice

    def reads(self) -> Slices:
        return (self.input, self.kernel)

    def writes(self) -> Slices:
        return (self.output,)


@dataclass(frozen=True)
class Copy(Thunk):
    """A byte copy between slices of equal size (same layout on both sides)."""

    kind: ClassVar[ThunkKind] = ThunkKind.COPY
    source: Slice
    destination: Slice

    def reads(self) -> Slices:
        return (self.source,)

    def writes(self) -> Slices:
        return (self.destination,)


@dataclass(frozen=True)
class Memset(Thunk):
    """Fill a slice with one repeated byte."""

    kind: ClassVar[ThunkKind] = ThunkKind.MEMSET
    destination: Slice
    byte: int = 0

    def writes(self) -> Slices:
        return (self.destination,)


@dataclass(frozen=True)
class While(Thunk):
    """Run `condition`, read the pred at `predicate`, run `body` while it is true.

    The loop state lives in the same slices for init, parameters, body result and result
    (copy insertion guarantees it), so the thunk copies nothing."""

    kind: ClassVar[ThunkKind] = ThunkKind.WHILE
    condition: tuple[Thunk, ...]
    body: tuple[Thunk, ...]
    predicate: Slice
    trip_count: int | None = None

    def reads(self) -> Slices:
        return (self.predicate,)


@dataclass(frozen=True)
class Conditional(Thunk):
    """Read the branch index (s32) or pred (true -> branch 0) at `selector`, run that branch."""

    kind: ClassVar[ThunkKind] = ThunkKind.CONDITIONAL
    selector: Slice
    branches: tuple[tuple[Thunk, ...], ...]
    selector_is_pred: bool = False

    def reads(self) -> Slices:
        return (self.selector,)

    def branch(self, selector) -> int:
        """The branch a selector value runs: a pred picks branch 0 when true, an index out of
        range runs the last branch (XLA's rule)."""
        if self.selector_is_pred:
            return 0 if selector else 1
        index = int(selector)
        return index if 0 <= index < len(self.branches) else len(self.branches) - 1


@dataclass(frozen=True)
class Sort(Thunk):
    """Sort `operands` along `dimension` with comparator computation `comparator`."""

    kind: ClassVar[ThunkKind] = ThunkKind.SORT
    operands: Slices
    outputs: Slices
    comparator: str
    dimension: int
    is_stable: bool = False

    def reads(self) -> Slices:
        return self.operands

    def writes(self) -> Slices:
        return self.outputs


@dataclass(frozen=True)
class Fft(Thunk):
    """An FFT of `input` into `output` (fft_type: the HLO FftType number)."""

    kind: ClassVar[ThunkKind] = ThunkKind.FFT
    input: Slice
    output: Slice
    fft_type: int
    fft_length: tuple[int, ...]

    def reads(self) -> Slices:
        return (self.input,)

    def writes(self) -> Slices:
        return (self.output,)


@dataclass(frozen=True)
class CustomCall(Thunk):
    """An HLO custom-call `target`, run by the runtime's implementation of that target."""

    kind: ClassVar[ThunkKind] = ThunkKind.CUSTOM_CALL
    target: str
    operands: Slices
    outputs: Slices
    api_version: int = 0
    backend_config: str = ""

    def reads(self) -> Slices:
        return self.operands

    def writes(self) -> Slices:
        return self.outputs


@dataclass(frozen=True)
class Sequential(Thunk):
    """A called computation's thunks, run in order (a `call` that was not inlined)."""

    kind: ClassVar[ThunkKind] = ThunkKind.SEQUENTIAL
    thunks: tuple[Thunk, ...]


THUNK_KINDS: dict[ThunkKind, type[Thunk]] = {
    cls.kind: cls for cls in (Kernel, Gemm, Convolution, Copy, Memset, While, Conditional,
                              Sort, Fft, CustomCall, Sequential)} | MULTI_DEVICE_KINDS


@dataclass(frozen=True)
class StreamAssignment:
    """For multi-stream targets: the stream of each top-level thunk and the synchronization
    its cross-stream dependencies need. events: (event id, stream, index of the thunk after
    which it is recorded); waits: (index of the thunk that waits, event id)."""

    num_streams: int
    streams: tuple[int, ...]
    events: tuple[tuple[int, int, int], ...]
    waits: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class ThunkProgram:
    """Everything a runtime needs besides the HLO: allocations, where the entry parameters,
    constants and results live, and the thunk sequence."""

    module: str
    allocations: tuple[Allocation, ...]
    parameters: tuple[tuple[int, tuple[int, ...], Slice], ...]  # (number, shape index, slice)
    outputs: tuple[tuple[tuple[int, ...], Slice], ...]  # (root shape index, slice)
    constants: tuple[tuple[str, Slice], ...]  # (constant instruction name, slice)
    sequence: tuple[Thunk, ...]
    streams: StreamAssignment | None = None

    def walk(self) -> Iterator[Thunk]:
        """Every thunk, nested ones included, depth-first (base.walk for parents and depth)."""
        return (visit.thunk for visit in walk(self.sequence))

    def kind_counts(self) -> dict[str, int]:
        return kind_counts(self.walk())
