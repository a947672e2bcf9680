"""The GPU program's bundle forms: `gpu_thunks.json` (versioned JSON) and `gpu_thunks.txt`.

Schema, version 1:
  {"gpu_thunks_version": 1, "module": str,
   "allocations": [{"index", "size", "kind", "parameter_number", "parameter_index",
                    "maybe_live_out", "aliased_with_output", "constant"}],
   "host_to_device": [{"slice", "number", "index", "constant"}],
   "main": [thunk], "device_to_host": [{"index", "slice"}],
   "streams": null | {"num_streams", "streams", "events", "waits"},
   "kernels": [recipe], "kernel_ir_sha256": {kernel: sha256}, "notes": [str],
   "resources": {arch: {kernel: {"registers", "shared_bytes", ...}}} (optional)}
A slice is [allocation, offset, size]; a thunk is {"kind", "name", fields...}. A gemm
thunk's "blas" is null or the cuBLAS form of a plain dot (schedule.BlasCall: "a", "b", "c"
slices, "a_type", "b_type", "c_type", "compute", "transa", "transb", "m", "n", "k", "lda",
"ldb", "ldc", "batch", "stride_a", "stride_b", "stride_c", "alpha", "beta", "swapped");
readers treat a missing "blas" as null.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, fields

from ...buffers.assignment import Allocation, Slice
from ...errors import InputError
from ...thunks.thunks import StreamAssignment
from . import schedule as gt
from .kernel import KernelRecipe

VERSION = 1
_SEQUENCES = frozenset({"condition", "body", "thunks"})
_ALLOC_FIELDS = ("index", "size", "kind", "parameter_number", "parameter_index",
                 "maybe_live_out", "aliased_with_output", "constant")


def _encode(name: str, value):
    if isinstance(value, gt.BlasCall):
        return value.to_json()
    if isinstance(value, Slice):
        return value.to_json()
    if name in ("args", "operands", "outputs"):
        return [s.to_json() for s in value]
    if name in _SEQUENCES:
        return [thunk_to_dict(t) for t in value]
    if name == "branches":
        return [[thunk_to_dict(t) for t in b] for b in value]
    return list(value) if isinstance(value, tuple) else value


def thunk_to_dict(thunk: gt.GpuThunk) -> dict:
    out = {"kind": thunk.kind}
    for f in fields(thunk):
        out[f.name] = _encode(f.name, getattr(thunk, f.name))
    return out


def _decode(name: str, value):
    if name == "blas":
        return None if value is None else gt.BlasCall.from_json(value)
    if name in ("args", "operands", "outputs"):
        return tuple(Slice(*s) for s in value)
    if name in _SEQUENCES:
        return tuple(thunk_from_dict(t) for t in value)
    if name == "branches":
        return tuple(tuple(thunk_from_dict(t) for t in b) for b in value)
    if name in ("source", "destination", "predicate", "selector"):
        return Slice(*value)
    return tuple(value) if isinstance(value, list) else value


def thunk_from_dict(d: dict) -> gt.GpuThunk:
    cls = gt.GPU_THUNK_KINDS.get(d.get("kind", ""))
    if cls is None:
        raise InputError(f"gpu_thunks.json: unknown thunk kind {d.get('kind')!r}")
    # Fields with a default may be absent (added after version 1 was first written: `blas`).
    return cls(**{f.name: _decode(f.name, d[f.name]) for f in fields(cls)
                  if f.name in d or f.default is MISSING})


def _streams_to_dict(s: StreamAssignment | None):
    if s is None:
        return None
    return {"num_streams": s.num_streams, "streams": list(s.streams),
            "events": [list(e) for e in s.events], "waits": [list(w) for w in s.waits]}


def program_to_dict(p: gt.GpuProgram, resources: dict | None = None) -> dict:
    d = {
        "gpu_thunks_version": VERSION, "module": p.module,
        "allocations": [{k: (list(v) if isinstance(v := getattr(a, k), tuple) else v)
                         for k in _ALLOC_FIELDS} for a in p.allocations],
        "host_to_device": [{"slice": u.slice.to_json(), "number": u.number,
                            "index": list(u.index), "constant": u.constant}
                           for u in p.host_to_device],
        "main": [thunk_to_dict(t) for t in p.main],
        "device_to_host": [{"index": list(o.index), "slice": o.slice.to_json()}
                           for o in p.device_to_host],
        "streams": _streams_to_dict(p.streams),
        "kernels": [r.to_json() for r in p.kernels],
        "kernel_ir_sha256": dict(p.kernel_ir_sha256),
        "notes": list(p.notes),
    }
    if resources:
        d["resources"] = resources
    return d


def program_to_json(p: gt.GpuProgram, resources: dict | None = None) -> bytes:
    return json.dumps(program_to_dict(p, resources), sort_keys=True,
                      separators=(",", ":")).encode()


def program_from_json(data: bytes | str) -> tuple[gt.GpuProgram, dict]:
    """The program and the per-arch kernel resources recorded with it."""
    try:
        d = json.loads(data)
    except ValueError as e:
        raise InputError(f"gpu_thunks.json is not JSON: {e}") from None
    if not isinstance(d, dict) or d.get("gpu_thunks_version") != VERSION:
        raise InputError("gpu_thunks.json: unsupported version "
                         f"{d.get('gpu_thunks_version') if isinstance(d, dict) else None!r} "
                         f"(this hloc reads version {VERSION})")
    try:
        return _from_dict(d), d.get("resources", {})
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"gpu_thunks.json: malformed program ({e})") from None


def _from_dict(d: dict) -> gt.GpuProgram:
    allocations = tuple(Allocation(**{k: (tuple(a[k]) if k == "parameter_index" else a[k])
                                      for k in _ALLOC_FIELDS}) for a in d["allocations"])
    s = d["streams"]
    streams = None if s is None else StreamAssignment(
        s["num_streams"], tuple(s["streams"]), tuple(tuple(e) for e in s["events"]),
        tuple(tuple(w) for w in s["waits"]))
    uploads = tuple(gt.Upload(Slice(*u["slice"]), u["number"], tuple(u["index"]), u["constant"])
                    for u in d["host_to_device"])
    downloads = tuple(gt.Download(tuple(o["index"]), Slice(*o["slice"]))
                      for o in d["device_to_host"])
    return gt.GpuProgram(d["module"], allocations, uploads,
                         tuple(thunk_from_dict(t) for t in d["main"]), downloads,
                         tuple(KernelRecipe.from_json(r) for r in d["kernels"]), streams,
                         tuple(d["notes"]), tuple(sorted(d["kernel_ir_sha256"].items())))


# ---- text ---------------------------------------------------------------------------------------

def _slice_text(s: Slice) -> str:
    return f"a{s.allocation}[{s.offset}:{s.offset + s.size}]"


def _gemm_text(t: gt.Gemm) -> str:
    blas = f" cublas-eligible {t.blas.text()}" if t.blas is not None else ""
    return f" m={t.m} n={t.n} k={t.k} batch={t.batch}{blas}"


def _thunk_line(t: gt.GpuThunk, resources: dict) -> str:
    if isinstance(t, gt.Kernel):
        res = resources.get(t.kernel)
        extra = (f" regs={res['registers']} smem={res['shared_bytes']}"
                 f" spills={res['spill_stores']}/{res['spill_loads']}" if res else "")
        gemm = _gemm_text(t) if isinstance(t, gt.Gemm) else ""
        return (f"{t.kind} %{t.name} @{t.kernel} [{t.variant}] grid={list(t.grid)} "
                f"block={list(t.block)}{gemm}{extra} args=("
                + ", ".join(_slice_text(s) for s in t.args) + ")")
    if isinstance(t, gt.Copy):
        return f"copy %{t.name} {_slice_text(t.source)} -> {_slice_text(t.destination)}"
    if isinstance(t, gt.Memset):
        return f"memset %{t.name} {_slice_text(t.destination)} byte={t.byte}"
    if isinstance(t, gt.HostCompute):
        return f"host %{t.name} ({t.opcode})"
    if isinstance(t, gt.While):
        trip = f" trip_count={t.trip_count}" if t.trip_count is not None else ""
        return f"while %{t.name} pred={_slice_text(t.predicate)}{trip}"
    if isinstance(t, gt.Conditional):
        return f"conditional %{t.name} selector={_slice_text(t.selector)}"
    return f"{t.kind} %{t.name}"


def _lines(t: gt.GpuThunk, indent: str, out: list[str], resources: dict, tag: str = "") -> None:
    out.append(indent + tag + _thunk_line(t, resources))
    if isinstance(t, gt.While):
        for label, seq in (("condition", t.condition), ("body", t.body)):
            out.append(f"{indent}  {label}:")
            for inner in seq:
                _lines(inner, indent + "    ", out, resources)
    elif isinstance(t, gt.Conditional):
        for b, branch in enumerate(t.branches):
            out.append(f"{indent}  branch {b}:")
            for inner in branch:
                _lines(inner, indent + "    ", out, resources)
    else:
        for inner in gt.nested(t):
            _lines(inner, indent + "  ", out, resources)


def program_to_text(p: gt.GpuProgram, resources: dict | None = None) -> str:
    """The readable GPU schedule (gpu_thunks.txt); resources: one arch's ptxas report."""
    res = resources or {}
    counts = ", ".join(f"{k}: {v}" for k, v in p.kind_counts().items())
    out = [f"GPU program for module {p.module} (gpu thunks version {VERSION})",
           f"kernels: {len(p.kernels)}; thunks: {counts}", "host-to-device:"]
    for u in p.host_to_device:
        what = f"constant {u.constant}" if u.constant else f"parameter {u.number}{list(u.index) or ''}"
        out.append(f"  {what} -> {_slice_text(u.slice)}{' (once)' if u.constant else ''}")
    out.append("main:")
    for i, t in enumerate(p.main):
        tag = f"[s{p.streams.streams[i]}] " if p.streams else ""
        _lines(t, "  ", out, res, tag)
    if p.streams:
        for i, e in p.streams.waits:
            out.append(f"  thunk {i} waits for event {e}")
    out.append("device-to-host:")
    for o in p.device_to_host:
        out.append(f"  output {list(o.index)} <- {_slice_text(o.slice)}")
    out += [f"note: {n}" for n in p.notes]
    return "\n".join(out) + "\n"
