"""Target-neutral thunks: what runs, in what order, on which buffer slices.

Every thunk is named after the HLO instruction it executes (unique in the module), so a
runtime can find the instruction for details the thunk does not repeat. Operand and output
slices are the array leaves of the operands / result, depth-first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..buffers.assignment import Allocation, Slice

Slices = tuple[Slice, ...]


@dataclass(frozen=True)
class Thunk:
    """Base class: `name` is the HLO instruction's name."""

    kind: ClassVar[str] = ""
    name: str


@dataclass(frozen=True)
class Kernel(Thunk):
    """A generated kernel: a fused computation (`computation`) or a single op (computation "")."""

    kind: ClassVar[str] = "kernel"
    opcode: str
    computation: str
    operands: Slices
    outputs: Slices


@dataclass(frozen=True)
class Gemm(Thunk):
    """A dot: lhs x rhs -> output, contraction described by the HLO instruction."""

    kind: ClassVar[str] = "gemm"
    lhs: Slice
    rhs: Slice
    output: Slice
    lhs_contracting: tuple[int, ...] = ()
    rhs_contracting: tuple[int, ...] = ()
    lhs_batch: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()


@dataclass(frozen=True)
class Convolution(Thunk):
    kind: ClassVar[str] = "convolution"
    input: Slice
    kernel: Slice
    output: Slice


@dataclass(frozen=True)
class Copy(Thunk):
    """A byte copy between slices of equal size (same layout on both sides)."""

    kind: ClassVar[str] = "copy"
    source: Slice
    destination: Slice


@dataclass(frozen=True)
class Memset(Thunk):
    """Fill a slice with one repeated byte."""

    kind: ClassVar[str] = "memset"
    destination: Slice
    byte: int = 0


@dataclass(frozen=True)
class While(Thunk):
    """Run `condition`, read the pred at `predicate`, run `body` while it is true.

    The loop state lives in the same slices for init, parameters, body result and result
    (copy insertion guarantees it), so the thunk copies nothing."""

    kind: ClassVar[str] = "while"
    condition: tuple[Thunk, ...]
    body: tuple[Thunk, ...]
    predicate: Slice
    trip_count: int | None = None


@dataclass(frozen=True)
class Conditional(Thunk):
    """Read the branch index (s32) or pred (true -> branch 0) at `selector`, run that branch."""

    kind: ClassVar[str] = "conditional"
    selector: Slice
    branches: tuple[tuple[Thunk, ...], ...]
    selector_is_pred: bool = False


@dataclass(frozen=True)
class Sort(Thunk):
    kind: ClassVar[str] = "sort"
    operands: Slices
    outputs: Slices
    comparator: str
    dimension: int
    is_stable: bool = False


@dataclass(frozen=True)
class Fft(Thunk):
    kind: ClassVar[str] = "fft"
    input: Slice
    output: Slice
    fft_type: int
    fft_length: tuple[int, ...]


@dataclass(frozen=True)
class CustomCall(Thunk):
    kind: ClassVar[str] = "custom-call"
    target: str
    operands: Slices
    outputs: Slices
    api_version: int = 0
    backend_config: str = ""


@dataclass(frozen=True)
class Sequential(Thunk):
    """A called computation's thunks, run in order (a `call` that was not inlined)."""

    kind: ClassVar[str] = "sequential"
    thunks: tuple[Thunk, ...]


THUNK_KINDS: dict[str, type[Thunk]] = {
    cls.kind: cls for cls in (Kernel, Gemm, Convolution, Copy, Memset, While, Conditional,
                              Sort, Fft, CustomCall, Sequential)}


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

    def walk(self):
        """Every thunk, nested ones included, depth-first."""
        return walk_thunks(self.sequence, nested)

    def kind_counts(self) -> dict[str, int]:
        return count_kinds(self.walk())


def io_slices(thunk) -> tuple[tuple[Slice, ...], tuple[Slice, ...]]:
    """(operand slices, output slices) of any data thunk (not control flow)."""
    kind = thunk.kind
    if kind == "gemm":
        return (thunk.lhs, thunk.rhs), (thunk.output,)
    if kind == "convolution":
        return (thunk.input, thunk.kernel), (thunk.output,)
    if kind == "fft":
        return (thunk.input,), (thunk.output,)
    return tuple(thunk.operands), tuple(thunk.outputs)


def walk_thunks(sequence, children):
    """Depth-first over a thunk sequence; `children(thunk)` yields a thunk's nested thunks.

    Shared by the target-neutral program here and the GPU program (hloc/codegen/cuda).
    """
    stack = list(reversed(sequence))
    while stack:
        thunk = stack.pop()
        yield thunk
        stack.extend(reversed(list(children(thunk))))


def count_kinds(thunks) -> dict[str, int]:
    """Thunk count by kind, sorted by kind."""
    counts: dict[str, int] = {}
    for t in thunks:
        counts[t.kind] = counts.get(t.kind, 0) + 1
    return dict(sorted(counts.items()))


def nested(thunk: Thunk):
    """The thunks directly nested in a control-flow thunk."""
    if isinstance(thunk, While):
        yield from thunk.condition
        yield from thunk.body
    elif isinstance(thunk, Conditional):
        for branch in thunk.branches:
            yield from branch
    elif isinstance(thunk, Sequential):
        yield from thunk.thunks
