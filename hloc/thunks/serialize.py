"""The bundle (JSON) forms of both thunk programs: `thunks.json` and `gpu_thunks.json`.

One field-driven codec serves both: a thunk is {"kind": ..., "name": ..., fields...}, each
field encoded by its role (base.field_roles): a slice is [allocation, offset, size], slice
tuples, nested sequences and branches are lists, a record field (gpu.BlasCall) a dict of its
fields, other tuples lists. A format is its member name, version key and kinds table, so a
new thunk kind needs no serializer change. Fields with a default may be absent when reading
(they were added after version 1 was first written: a GemmLaunch's `blas`).

thunks.json, version 1 (all keys always present):
  {"version": 1, "module": str,
   "allocations": [{"index", "size", "kind", "parameter_number", "parameter_index",
                    "maybe_live_out", "aliased_with_output", "constant"}],
   "parameters": [{"number", "index", "slice"}], "outputs": [{"index", "slice"}],
   "constants": [{"instruction", "slice"}],
   "sequence": [thunk], "streams": null | {"num_streams", "streams", "events", "waits"}}

gpu_thunks.json, version 2 (version 1 is still read: it had no ConvCall `direction` and
`mode`, which default to a forward cross-correlation; a version-1 reader would run a
backward descriptor as a forward one, so writing them bumped the version):
  {"gpu_thunks_version": 2, "module": str, "allocations": [as above],
   "host_to_device": [{"slice", "number", "index", "constant"}],
   "main": [thunk], "device_to_host": [{"index", "slice"}],
   "streams": null | {...as above}, "kernels": [recipe], "kernel_ir_sha256": {kernel: sha256},
   "notes": [str], "resources": {arch: {kernel: {"registers", "shared_bytes", ...}}} (optional)}
A gemm thunk's "blas" is null or the cuBLAS form of a plain dot (gpu.BlasCall's fields).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..buffers.assignment import Allocation, Slice
from ..errors import InputError
from ..util.record import dataclass
from .base import FieldRole, Role, Thunk, ThunkKind, field_roles
from .thunks import THUNK_KINDS, StreamAssignment, ThunkProgram

if TYPE_CHECKING:
    from .gpu import GpuProgram

VERSION = 1
GPU_VERSION = 2
GPU_READABLE = (1, 2)  # versions gpu_thunks.json is read in
_ALLOC_FIELDS = ("index", "size", "kind", "parameter_number", "parameter_index", "maybe_live_out",
                 "aliased_with_output", "constant")


@dataclass(frozen=True)
class Format:
    """One program format: its bundle member, version key and thunk kinds."""

    member: str
    version_key: str
    version: int
    kinds: Mapping[ThunkKind, type[Thunk]]
    readable: tuple[int, ...] = ()  # older versions still read (besides `version`)

    def encode(self, thunk: Thunk) -> dict:
        out = {"kind": str(thunk.kind)}
        out.update(self.encode_record(thunk))
        return out

    def decode(self, data: dict) -> Thunk:
        cls = self.kinds.get(data.get("kind", ""))
        if cls is None:
            raise InputError(f"{self.member}: unknown thunk kind {data.get('kind')!r}")
        try:
            return self.decode_record(cls, data)
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{self.member}: malformed {cls.kind} thunk ({e})") from None

    def encode_record(self, value) -> dict:
        """A dataclass value (thunk or record) as a dict of its encoded fields."""
        return {f.name: self._value(f.role, getattr(value, f.name))
                for f in field_roles(type(value))}

    def _value(self, role: Role, value):
        if role is Role.SLICE:
            return value.to_json()
        if role is Role.SLICES:
            return [s.to_json() for s in value]
        if role is Role.SEQUENCE:
            return [self.encode(t) for t in value]
        if role is Role.BRANCHES:
            return [[self.encode(t) for t in branch] for branch in value]
        if role is Role.RECORD:
            return None if value is None else self.encode_record(value)
        return list(value) if isinstance(value, tuple) else value

    def decode_record(self, cls: type, data: dict):
        """An instance of dataclass `cls` from its encoded fields (defaulted ones optional)."""
        return cls(**{f.name: self._from_value(f, data[f.name]) for f in field_roles(cls)
                      if f.name in data or not f.optional})

    def _from_value(self, f: FieldRole, value):
        if f.role is Role.SLICE:
            return Slice(*value)
        if f.role is Role.SLICES:
            return tuple(Slice(*s) for s in value)
        if f.role is Role.SEQUENCE:
            return tuple(self.decode(t) for t in value)
        if f.role is Role.BRANCHES:
            return tuple(tuple(self.decode(t) for t in branch) for branch in value)
        if f.role is Role.RECORD:
            return None if value is None else self.decode_record(f.record, value)
        return _tuples(value)

    def dumps(self, d: dict) -> bytes:
        """Deterministic JSON bytes of a program dict (with this format's version)."""
        return json.dumps({self.version_key: self.version, **d}, sort_keys=True,
                          separators=(",", ":")).encode()

    def loads(self, data: bytes | str) -> dict:
        """A program dict, its version checked."""
        try:
            d = json.loads(data)
        except ValueError as e:
            raise InputError(f"{self.member} is not JSON: {e}") from None
        if not isinstance(d, dict) or d.get(self.version_key) not in (self.version,
                                                                       *self.readable):
            found = d.get(self.version_key) if isinstance(d, dict) else None
            raise InputError(f"{self.member}: unsupported version {found!r} "
                             f"(this hloc reads version {self.version})")
        return d


def _tuples(value):
    """JSON lists back to (nested) tuples."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


THUNKS_JSON = Format("thunks.json", "version", VERSION, THUNK_KINDS)


@functools.cache
def gpu_thunks_json() -> Format:
    """gpu_thunks.json's format (the GPU kinds are imported on first use: a CPU compile
    never needs them)."""
    from .gpu import GPU_THUNK_KINDS

    return Format("gpu_thunks.json", "gpu_thunks_version", GPU_VERSION, GPU_THUNK_KINDS,
                  GPU_READABLE)


# ---- parts both programs have -------------------------------------------------------------------

def _allocations_to_json(allocations) -> list[dict]:
    return [{k: (list(v) if isinstance(v := getattr(a, k), tuple) else v) for k in _ALLOC_FIELDS}
            for a in allocations]


def _allocations_from_json(items) -> tuple[Allocation, ...]:
    return tuple(Allocation(**{k: (tuple(a[k]) if k == "parameter_index" else a[k])
                               for k in _ALLOC_FIELDS}) for a in items)


def _streams_to_json(s: StreamAssignment | None):
    if s is None:
        return None
    return {"num_streams": s.num_streams, "streams": list(s.streams),
            "events": [list(e) for e in s.events], "waits": [list(w) for w in s.waits]}


def _streams_from_json(s) -> StreamAssignment | None:
    if s is None:
        return None
    return StreamAssignment(s["num_streams"], tuple(s["streams"]),
                            tuple(tuple(e) for e in s["events"]),
                            tuple(tuple(w) for w in s["waits"]))


def _malformed(fmt: Format, e: Exception) -> InputError:
    return InputError(f"{fmt.member}: malformed program ({e})")


# ---- thunks.json ----------------------------------------------------------------------------------

def program_to_json(program: ThunkProgram) -> bytes:
    """Deterministic JSON bytes (the bundle member thunks.json)."""
    return THUNKS_JSON.dumps({
        "module": program.module,
        "allocations": _allocations_to_json(program.allocations),
        "parameters": [{"number": n, "index": list(i), "slice": s.to_json()}
                       for n, i, s in program.parameters],
        "outputs": [{"index": list(i), "slice": s.to_json()} for i, s in program.outputs],
        "constants": [{"instruction": c, "slice": s.to_json()} for c, s in program.constants],
        "sequence": [THUNKS_JSON.encode(t) for t in program.sequence],
        "streams": _streams_to_json(program.streams),
    })


def program_from_json(data: bytes | str) -> ThunkProgram:
    d = THUNKS_JSON.loads(data)
    try:
        return ThunkProgram(
            d["module"], _allocations_from_json(d["allocations"]),
            tuple((p["number"], tuple(p["index"]), Slice(*p["slice"])) for p in d["parameters"]),
            tuple((tuple(o["index"]), Slice(*o["slice"])) for o in d["outputs"]),
            tuple((c["instruction"], Slice(*c["slice"])) for c in d["constants"]),
            tuple(THUNKS_JSON.decode(t) for t in d["sequence"]), _streams_from_json(d["streams"]))
    except (KeyError, TypeError, ValueError) as e:
        raise _malformed(THUNKS_JSON, e) from None


# ---- gpu_thunks.json ------------------------------------------------------------------------------

def gpu_program_to_json(p: GpuProgram, resources: dict | None = None) -> bytes:
    """Deterministic JSON bytes (the bundle member gpu_thunks.json); resources: per-arch
    kernel resources from ptxas, recorded when present."""
    fmt = gpu_thunks_json()
    d = {
        "module": p.module,
        "allocations": _allocations_to_json(p.allocations),
        "host_to_device": [fmt.encode_record(u) for u in p.host_to_device],
        "main": [fmt.encode(t) for t in p.main],
        "device_to_host": [fmt.encode_record(o) for o in p.device_to_host],
        "streams": _streams_to_json(p.streams),
        "kernels": [r.to_json() for r in p.kernels],
        "kernel_ir_sha256": dict(p.kernel_ir_sha256),
        "notes": list(p.notes),
    }
    if resources:
        d["resources"] = resources
    return fmt.dumps(d)


def gpu_program_from_json(data: bytes | str) -> tuple[GpuProgram, dict]:
    """The program and the per-arch kernel resources recorded with it."""
    from .gpu import Download, GpuProgram, KernelRecipe, Upload

    fmt = gpu_thunks_json()
    d = fmt.loads(data)
    try:
        program = GpuProgram(
            d["module"], _allocations_from_json(d["allocations"]),
            tuple(fmt.decode_record(Upload, u) for u in d["host_to_device"]),
            tuple(fmt.decode(t) for t in d["main"]),
            tuple(fmt.decode_record(Download, o) for o in d["device_to_host"]),
            tuple(KernelRecipe.from_json(r) for r in d["kernels"]),
            _streams_from_json(d["streams"]), tuple(d["notes"]),
            tuple(sorted(d["kernel_ir_sha256"].items())))
    except (KeyError, TypeError, ValueError) as e:
        raise _malformed(fmt, e) from None
    return program, d.get("resources", {})
