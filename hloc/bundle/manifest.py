"""The bundle manifest: its shape, a dependency-free checker, and builders for its sections.

The JSON Schema `schemas/bundle-manifest.schema.json` (also shipped as package data,
`schema_path()`) is the documentation and the dev-time oracle; at run time hloc checks
manifests with the small combinator checker below so that `jsonschema` is not a runtime
dependency. The tests keep the two in agreement.

`manifest_problem(m, strict=False)` returns the first problem as a one-line string (with a
JSON path such as `entry.parameters[1].shape[0]`) or None. Readers use strict=False: keys they
do not know are ignored, which is what lets a 1.x reader open later 1.y bundles. Writers use
strict=True, which matches the schema's `additionalProperties: false`.

Sections (see the schema for every field): format_version, hloc_version, target, entry,
compiler, input, members (filled in by the writer), memory (optional), notes (optional),
devices (multi-device bundles only, hloc.bundle.devices).
`entry_section(module)` builds `entry` from an `hloc.ir.Module`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from ..errors import UnsupportedError
from .format import member_name_problem

TARGET_KINDS = ("cpu", "cuda", "interpreter")
# The MODEL forms, spelled as hloc.frontend.load.FORMS spells them.
INPUT_FORMS = ("HloModuleProto", "HloProto", "HloSnapshot", "HloModuleProtoWithConfig", "text")
# The array element types (hloc.ir.dtypes' types with a NumPy dtype), spelled out so that
# writing a bundle does not import the IR and NumPy (a compile-cache hit writes one);
# tests/test_bundle_format.py checks this against hloc.ir.dtypes and the schema.
DTYPE_NAMES = ("pred", "s2", "s4", "s8", "s16", "s32", "s64", "u2", "u4", "u8", "u16", "u32",
               "u64", "f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz",
               "f8e5m2fnuz", "f8e4m3fnuz", "f8e4m3", "f8e3m4", "f4e2m1fn", "f8e8m0fnu", "c64",
               "c128")

# A check takes (value, json path, strict) and returns a problem or None.
Check = Callable[[object, str, bool], "str | None"]


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _string(pattern: str | None = None, min_length: int = 0) -> Check:
    rx = re.compile(pattern) if pattern else None

    def check(v, path, strict):
        if not isinstance(v, str):
            return f"{path}: expected a string"
        if len(v) < min_length:
            return f"{path}: must not be empty"
        if rx and not rx.search(v):
            return f"{path}: {v[:40]!r} does not match {pattern}"
        return None
    return check


def _integer(lo: int = 0, hi: int | None = None, nullable: bool = False) -> Check:
    def check(v, path, strict):
        if v is None and nullable:
            return None
        if not _is_int(v) or v < lo or (hi is not None and v > hi):
            bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            return f"{path}: expected an integer {bound}" + (" or null" if nullable else "")
        return None
    return check


def _boolean(v, path, strict):
    return None if isinstance(v, bool) else f"{path}: expected true or false"


def _enum(values: tuple[str, ...]) -> Check:
    def check(v, path, strict):
        return None if v in values else f"{path}: {v!r} is not one of {', '.join(values)}"
    return check


def _array(item: Check, nullable: bool = False) -> Check:
    def check(v, path, strict):
        if v is None and nullable:
            return None
        if not isinstance(v, list):
            return f"{path}: expected a list" + (" or null" if nullable else "")
        for i, x in enumerate(v):
            if problem := item(x, f"{path}[{i}]", strict):
                return problem
        return None
    return check


def _object(required: dict[str, Check], optional: dict[str, Check] | None = None) -> Check:
    optional = optional or {}

    def check(v, path, strict):
        if not isinstance(v, dict):
            return f"{path}: expected an object"
        for key in required:
            if key not in v:
                return f"{path}: missing key {key!r}"
        for key, value in v.items():
            sub = required.get(key) or optional.get(key)
            if sub is None:
                if strict:
                    return f"{path}: unknown key {key!r}"
                continue
            if problem := sub(value, f"{path}.{key}", strict):
                return problem
        return None
    return check


def _member_map(value: Check) -> Check:
    def check(v, path, strict):
        if not isinstance(v, dict):
            return f"{path}: expected an object"
        for key, x in v.items():
            if problem := member_name_problem(key):
                return f"{path}: {problem}"
            if problem := value(x, f"{path}[{key!r}]", strict):
                return problem
        return None
    return check


def _count_map(v, path, strict):
    if not isinstance(v, dict):
        return f"{path}: expected an object"
    for key, x in v.items():
        if not isinstance(key, str) or not _is_int(x) or x < 0:
            return f"{path}[{key!r}]: expected a non-negative integer"
    return None


_COUNT = _integer(0)
_SHA256 = _string("^[0-9a-f]{64}$")
_STRINGS = _array(_string())
_DIMS = _array(_COUNT)
_DTYPE = _enum(DTYPE_NAMES)
_LAYOUT = _array(_COUNT, nullable=True)

_PARAMETER = _object({"name": _string(), "index": _COUNT, "dtype": _DTYPE, "shape": _DIMS,
                      "layout": _LAYOUT})
_RESULT = _object({"index": _COUNT, "dtype": _DTYPE, "shape": _DIMS, "layout": _LAYOUT},
                  {"shape_index": _DIMS})

def _sharding_text(v, path, strict):
    return None if v is None or isinstance(v, str) else f"{path}: expected a string or null"


# Multi-device bundles only (hloc.bundle.devices).
_DEVICES = _object({"count": _integer(2), "replica_count": _integer(1),
                    "num_partitions": _integer(1), "device_assignment": _array(_DIMS),
                    "parameters": _array(_sharding_text), "outputs": _array(_sharding_text)})

_MANIFEST = _object(
    {
        "format_version": _string(r"^1\.[0-9]+$"),
        "hloc_version": _string(min_length=1),
        "target": _object({"kind": _enum(TARGET_KINDS)},
                          {"triple": _string(), "cpu": _string(), "cpu_features": _STRINGS,
                           "cuda_archs": _array(_string(r"^sm_[0-9]+[a-z]?$"))}),
        "entry": _object({"name": _string(), "parameters": _array(_PARAMETER),
                          "results": _array(_RESULT), "result_is_tuple": _boolean}),
        "compiler": _object({"version": _string(), "flags": _STRINGS, "passes": _STRINGS},
                            {"opt_level": _integer(0, 3, nullable=True), "cache_key": _SHA256}),
        "input": _object({"sha256": _SHA256, "form": _enum(INPUT_FORMS)},
                         {"module_name": _string()}),
        "members": _member_map(_object({"sha256": _SHA256, "size": _COUNT})),
    },
    {
        "memory": _object({k: _COUNT for k in ("temp_bytes", "argument_bytes", "output_bytes",
                                              "constant_bytes")}),
        "thunks": _object({"counts": _count_map}),
        "notes": _STRINGS,
        "devices": _DEVICES,
    },
)


def _entry_problem(entry: dict) -> str | None:
    """Rules the schema cannot state: indices are positions; a non-tuple result is one leaf."""
    for i, p in enumerate(entry["parameters"]):
        if p["index"] != i:
            return f"entry.parameters[{i}].index: is {p['index']}, expected {i}"
    for i, r in enumerate(entry["results"]):
        if r["index"] != i:
            return f"entry.results[{i}].index: is {r['index']}, expected {i}"
    if not entry["result_is_tuple"] and len(entry["results"]) != 1:
        return "entry.results: a non-tuple result must have exactly one entry"
    return None


def manifest_problem(manifest: object, *, strict: bool = False) -> str | None:
    """The first problem with a manifest (one line, with its JSON path), or None."""
    if problem := _MANIFEST(manifest, "manifest", strict):
        return problem
    return _entry_problem(manifest["entry"])  # type: ignore[index]


def schema_path() -> Path:
    """The installed copy of bundle-manifest.schema.json (package data)."""
    from importlib import resources

    return Path(str(resources.files("hloc") / "schemas" / "bundle-manifest.schema.json"))


def _layout_list(shape) -> list[int] | None:
    return list(shape.layout.minor_to_major) if shape.layout is not None else None


def entry_section(module) -> dict:
    """The manifest's `entry` section for an `hloc.ir.Module` (results flattened depth-first)."""
    comp = module.entry
    params = []
    for p in comp.parameters:
        if not p.shape.is_array:
            raise UnsupportedError(f"entry parameter {p.name} has non-array shape {p.shape}; "
                                   "bundles take array parameters only")
        params.append({"name": p.name, "index": p.attrs.parameter_number,
                       "dtype": p.shape.dtype.name, "shape": list(p.shape.dims),
                       "layout": _layout_list(p.shape)})
    params.sort(key=lambda d: d["index"])
    result_shape = comp.result_shape
    results = []
    for i, (index, leaf) in enumerate(result_shape.leaves()):
        if not leaf.is_array:
            raise UnsupportedError(f"entry result element {list(index)} has shape {leaf}; "
                                   "bundles return arrays only")
        results.append({"index": i, "shape_index": list(index), "dtype": leaf.dtype.name,
                        "shape": list(leaf.dims), "layout": _layout_list(leaf)})
    return {"name": comp.name, "parameters": params, "results": results,
            "result_is_tuple": result_shape.is_tuple}
