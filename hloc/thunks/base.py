"""The thunk model every program shares: kinds, the `Thunk` base, and walking thunk trees.

A thunk is a frozen dataclass of plain data (what runs, on which buffer slices); executing it
is each runtime's business (builders keyed by `ThunkKind`). Two programs are built from these
thunks: the target-neutral `ThunkProgram` (thunks.py) and the CUDA `GpuProgram` (gpu.py),
which reuses the control-flow and memory thunks and adds its own leaf kinds.

A thunk class declares:
- `kind`, a `ThunkKind` (its name in the bundle JSON);
- `reads()` / `writes()`: the slices it reads and writes itself (XLA's buffer_uses), so that
  stream assignment, the runtimes and the tools never guess from field names;
- its fields, whose types drive the rest: fields typed `tuple[Thunk, ...]` (a sequence) or
  `tuple[tuple[Thunk, ...], ...]` (branches) are nested sequences, which `nested()`, `walk()`,
  `map_nested()` and the serializer (serialize.py) find without a list of control-flow kinds.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Iterable, Iterator
from enum import Enum, StrEnum
from typing import ClassVar, NamedTuple

from ..buffers.assignment import Slice
from ..util.record import dataclass

Slices = tuple[Slice, ...]


class ThunkKind(StrEnum):
    """Every thunk kind; the values are the `kind` strings of thunks.json / gpu_thunks.json.

    A kind names one class within a program format: in a GpuProgram "kernel" and "gemm" are
    launches (gpu.Launch, gpu.GemmLaunch), in a ThunkProgram the target-neutral thunks."""

    KERNEL = "kernel"
    GEMM = "gemm"
    CONVOLUTION = "convolution"
    COPY = "copy"
    MEMSET = "memset"
    WHILE = "while"
    CONDITIONAL = "conditional"
    SORT = "sort"
    FFT = "fft"
    CUSTOM_CALL = "custom-call"
    SEQUENTIAL = "sequential"
    HOST = "host"
    COLLECTIVE = "collective"
    DEVICE_ID = "device-id"


@dataclass(frozen=True)
class Thunk:
    """Base class: `name` is the HLO instruction the thunk executes (unique in the module)."""

    kind: ClassVar[ThunkKind]
    name: str

    def reads(self) -> Slices:
        """The slices this thunk reads (nested thunks not included)."""
        return ()

    def writes(self) -> Slices:
        """The slices this thunk writes (nested thunks not included)."""
        return ()

    def nested(self) -> tuple[tuple[Thunk, ...], ...]:
        """The thunk sequences directly nested in this one (control flow), in field order."""
        out: list[tuple[Thunk, ...]] = []
        for f in field_roles(type(self)):
            if f.role is Role.SEQUENCE:
                out.append(getattr(self, f.name))
            elif f.role is Role.BRANCHES:
                out.extend(getattr(self, f.name))
        return tuple(out)


# ---- field roles: what each dataclass field holds, from its type ------------------------------

class Role(Enum):
    """How a field's value is walked and serialized."""

    SLICE = "slice"  # a Slice
    SLICES = "slices"  # tuple[Slice, ...]
    SEQUENCE = "sequence"  # tuple[Thunk, ...]
    BRANCHES = "branches"  # tuple[tuple[Thunk, ...], ...]
    RECORD = "record"  # a dataclass (or None), serialized field by field
    PLAIN = "plain"  # JSON scalars and tuples of them


class FieldRole(NamedTuple):
    """A dataclass field's name and role; `optional` if it has a default."""

    name: str
    role: Role
    record: type | None  # the dataclass of a RECORD field
    optional: bool


_ROLE_OF_TYPE = {Slice: Role.SLICE, Slices: Role.SLICES, tuple[Thunk, ...]: Role.SEQUENCE,
                 tuple[tuple[Thunk, ...], ...]: Role.BRANCHES}


def _role(hint) -> tuple[Role, type | None]:
    role = _ROLE_OF_TYPE.get(hint)
    if role is not None:
        return role, None
    options = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if (len(options) == 1 and isinstance(options[0], type)
            and dataclasses.is_dataclass(options[0])):
        return Role.RECORD, options[0]
    return Role.PLAIN, None


def field_roles(cls: type) -> tuple[FieldRole, ...]:
    """The role of every field of dataclass `cls`, in field order."""
    # Typed as `type`, not inferred: typeshed's cache wants Hashable arguments, which mypy
    # denies a frozen dataclass's class object (type[Thunk]); classes are hashable.
    return _field_roles(cls)


@functools.cache
def _field_roles(cls: type) -> tuple[FieldRole, ...]:
    hints = typing.get_type_hints(cls)
    return tuple(FieldRole(f.name, *_role(hints[f.name]), f.default is not dataclasses.MISSING
                           or f.default_factory is not dataclasses.MISSING)
                 for f in dataclasses.fields(cls))


# ---- walking thunk trees ------------------------------------------------------------------------

class Visit(NamedTuple):
    """One thunk met by `walk`: its parent (None at the top level) and nesting depth."""

    thunk: Thunk
    parent: Thunk | None
    depth: int


def walk(sequence: Iterable[Thunk]) -> Iterator[Visit]:
    """Every thunk of `sequence`, nested ones included, depth-first in program order."""
    stack = [Visit(t, None, 0) for t in reversed(tuple(sequence))]
    while stack:
        visit = stack.pop()
        yield visit
        inner = [t for seq in visit.thunk.nested() for t in seq]
        stack.extend(Visit(t, visit.thunk, visit.depth + 1) for t in reversed(inner))


def footprint(thunk: Thunk) -> tuple[list[Slice], list[Slice]]:
    """(slices read, slices written) by `thunk` and every thunk nested in it."""
    reads: list[Slice] = []
    writes: list[Slice] = []
    for visit in walk((thunk,)):
        reads.extend(visit.thunk.reads())
        writes.extend(visit.thunk.writes())
    return reads, writes


def map_nested(thunk: Thunk, fn: Callable[[tuple[Thunk, ...]], tuple[Thunk, ...]]) -> Thunk:
    """`thunk` with `fn` applied to each of its nested sequences (itself if it has none)."""
    changes: dict[str, typing.Any] = {}  # new field values, each of its field's type
    for f in field_roles(type(thunk)):
        value = getattr(thunk, f.name)
        if f.role is Role.SEQUENCE:
            changes[f.name] = fn(value)
        elif f.role is Role.BRANCHES:
            changes[f.name] = tuple(fn(branch) for branch in value)
    return dataclasses.replace(thunk, **changes) if changes else thunk


def kind_counts(thunks: Iterable[Thunk]) -> dict[str, int]:
    """Thunk count by kind, sorted by kind."""
    counts: dict[str, int] = {}
    for t in thunks:
        counts[str(t.kind)] = counts.get(str(t.kind), 0) + 1
    return dict(sorted(counts.items()))
