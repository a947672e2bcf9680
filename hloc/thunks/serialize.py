"""The thunk program's bundle form (versioned JSON, `thunks.json`) and its text form.

Schema, version 1 (all keys always present):
  {"version": 1, "module": str,
   "allocations": [{"index", "size", "kind", "parameter_number", "parameter_index",
                    "maybe_live_out", "aliased_with_output", "constant"}],
   "parameters": [{"number", "index", "slice"}], "outputs": [{"index", "slice"}],
   "constants": [{"instruction", "slice"}],
   "sequence": [thunk], "streams": null | {"num_streams", "streams", "events", "waits"}}
A slice is [allocation, offset, size]; a thunk is {"kind": ..., "name": ..., fields...} where
slice fields hold slices, operands/outputs lists of slices, condition/body/thunks lists of
thunks and branches a list of thunk lists.
"""

from __future__ import annotations

import json
from dataclasses import fields

from ..buffers.assignment import Allocation, Slice
from ..errors import InputError
from .thunks import THUNK_KINDS, StreamAssignment, Thunk, ThunkProgram, nested

VERSION = 1
_SLICE_LISTS = frozenset({"operands", "outputs"})
_SEQUENCES = frozenset({"condition", "body", "thunks"})
_ALLOC_FIELDS = ("index", "size", "kind", "parameter_number", "parameter_index", "maybe_live_out",
                 "aliased_with_output", "constant")


def _encode(name: str, value):
    if isinstance(value, Slice):
        return value.to_json()
    if name in _SLICE_LISTS:
        return [s.to_json() for s in value]
    if name in _SEQUENCES:
        return [thunk_to_dict(t) for t in value]
    if name == "branches":
        return [[thunk_to_dict(t) for t in b] for b in value]
    return list(value) if isinstance(value, tuple) else value


def thunk_to_dict(thunk: Thunk) -> dict:
    out = {"kind": thunk.kind}
    for f in fields(thunk):
        out[f.name] = _encode(f.name, getattr(thunk, f.name))
    return out


def _decode(name: str, value, annotation: str):
    if name in _SLICE_LISTS:
        return tuple(Slice(*s) for s in value)
    if name in _SEQUENCES:
        return tuple(thunk_from_dict(t) for t in value)
    if name == "branches":
        return tuple(tuple(thunk_from_dict(t) for t in b) for b in value)
    if annotation == "Slice":
        return Slice(*value)
    return tuple(value) if isinstance(value, list) else value


def thunk_from_dict(data: dict) -> Thunk:
    cls = THUNK_KINDS.get(data.get("kind", ""))
    if cls is None:
        raise InputError(f"thunks.json: unknown thunk kind {data.get('kind')!r}")
    try:
        kwargs = {f.name: _decode(f.name, data[f.name], str(f.type)) for f in fields(cls)}
    except (KeyError, TypeError) as e:
        raise InputError(f"thunks.json: malformed {cls.kind} thunk ({e})") from None
    return cls(**kwargs)


def program_to_dict(program: ThunkProgram) -> dict:
    streams = program.streams
    return {
        "version": VERSION,
        "module": program.module,
        "allocations": [{k: _plain(getattr(a, k)) for k in _ALLOC_FIELDS} for a in program.allocations],
        "parameters": [{"number": n, "index": list(i), "slice": s.to_json()}
                       for n, i, s in program.parameters],
        "outputs": [{"index": list(i), "slice": s.to_json()} for i, s in program.outputs],
        "constants": [{"instruction": c, "slice": s.to_json()} for c, s in program.constants],
        "sequence": [thunk_to_dict(t) for t in program.sequence],
        "streams": None if streams is None else {
            "num_streams": streams.num_streams, "streams": list(streams.streams),
            "events": [list(e) for e in streams.events], "waits": [list(w) for w in streams.waits]},
    }


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def program_to_json(program: ThunkProgram) -> bytes:
    """Deterministic JSON bytes (the bundle member thunks.json)."""
    return json.dumps(program_to_dict(program), sort_keys=True, separators=(",", ":")).encode()


def program_from_json(data: bytes | str) -> ThunkProgram:
    try:
        d = json.loads(data)
    except ValueError as e:
        raise InputError(f"thunks.json is not JSON: {e}") from None
    if not isinstance(d, dict) or d.get("version") != VERSION:
        raise InputError(f"thunks.json: unsupported version {d.get('version') if isinstance(d, dict) else None!r} "
                         f"(this hloc reads version {VERSION})")
    try:
        return _program_from_dict(d)
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"thunks.json: malformed program ({e})") from None


def _program_from_dict(d: dict) -> ThunkProgram:
    allocations = tuple(Allocation(**{k: (tuple(a[k]) if k == "parameter_index" else a[k])
                                      for k in _ALLOC_FIELDS}) for a in d["allocations"])
    s = d["streams"]
    streams = None if s is None else StreamAssignment(
        s["num_streams"], tuple(s["streams"]), tuple(tuple(e) for e in s["events"]),
        tuple(tuple(w) for w in s["waits"]))
    return ThunkProgram(
        d["module"], allocations,
        tuple((p["number"], tuple(p["index"]), Slice(*p["slice"])) for p in d["parameters"]),
        tuple((tuple(o["index"]), Slice(*o["slice"])) for o in d["outputs"]),
        tuple((c["instruction"], Slice(*c["slice"])) for c in d["constants"]),
        tuple(thunk_from_dict(t) for t in d["sequence"]), streams)


# ---- text ---------------------------------------------------------------------------------------

def _slice_text(s: Slice) -> str:
    return f"a{s.allocation}[{s.offset}:{s.offset + s.size}]"


def _field_text(name: str, value) -> str | None:
    if name in _SEQUENCES or name == "branches" or name == "name":
        return None
    if isinstance(value, Slice):
        return f"{name}={_slice_text(value)}"
    if name in _SLICE_LISTS:
        return f"{name}=(" + ", ".join(_slice_text(s) for s in value) + ")"
    if value in ("", None, ()):
        return None
    return f"{name}={value}"


def _thunk_lines(thunk: Thunk, indent: str, out: list[str], stream: str = "") -> None:
    parts = [p for f in fields(thunk) if (p := _field_text(f.name, getattr(thunk, f.name)))]
    out.append(f"{indent}{stream}{thunk.kind} %{thunk.name} " + " ".join(parts))
    if thunk.kind == "while":
        out.append(f"{indent}  condition:")
        for t in thunk.condition:
            _thunk_lines(t, indent + "    ", out)
        out.append(f"{indent}  body:")
        for t in thunk.body:
            _thunk_lines(t, indent + "    ", out)
    elif thunk.kind == "conditional":
        for b, branch in enumerate(thunk.branches):
            out.append(f"{indent}  branch {b}:")
            for t in branch:
                _thunk_lines(t, indent + "    ", out)
    else:
        for t in nested(thunk):
            _thunk_lines(t, indent + "  ", out)


def program_to_text(program: ThunkProgram) -> str:
    """The readable thunk schedule (thunks.txt, `hloc inspect`)."""
    out = [f"thunk program for module {program.module} (format version {VERSION})", "allocations:"]
    for a in program.allocations:
        extra = (f" parameter {a.parameter_number}{list(a.parameter_index) or ''}"
                 if a.kind == "parameter" else f" {a.constant}" if a.kind == "constant" else "")
        flags = " live-out" if a.maybe_live_out else ""
        out.append(f"  a{a.index}: {a.size} bytes {a.kind}{extra}{flags}")
    for n, i, s in program.parameters:
        out.append(f"parameter {n}{list(i) if i else ''} -> {_slice_text(s)}")
    for i, s in program.outputs:
        out.append(f"output {list(i)} <- {_slice_text(s)}")
    counts = ", ".join(f"{k}: {v}" for k, v in program.kind_counts().items())
    out.append(f"sequence ({counts}):")
    streams = program.streams
    for idx, t in enumerate(program.sequence):
        tag = f"[s{streams.streams[idx]}] " if streams else ""
        _thunk_lines(t, "  ", out, tag)
    if streams:
        out.append(f"streams: {streams.num_streams}, events: {len(streams.events)}, "
                   f"waits: {len(streams.waits)}")
        for i, e in streams.waits:
            out.append(f"  thunk {i} waits for event {e}")
    return "\n".join(out) + "\n"
