"""OpSharding <-> the HLO text form kept in Attrs.sharding.

Covered: {replicated}, {manual}, {unknown}, {unreduced}, {maximal device=N}, tuples of those,
and tiled shardings `{devices=[2,1]0,1}` / `{devices=[2,2]<=[4]}` / `<=[2,2]T(1,0)` with
`last_tile_dim_replicate` or `last_tile_dims={...}`. Sharding metadata, shard groups and
named (mesh) shardings are dropped: hloc compiles for one device, where they have no effect.
"""

from __future__ import annotations

import re

from .gen import xla_data_pb2
from .shape_proto import MalformedProto

_Type = xla_data_pb2.OpSharding
_SIMPLE = {
    _Type.REPLICATED: "replicated",
    _Type.MANUAL: "manual",
    _Type.UNKNOWN: "unknown",
    _Type.UNREDUCED: "unreduced",
}
_SIMPLE_BY_TEXT = {v: k for k, v in _SIMPLE.items()}


def _ints(values) -> str:
    return ",".join(str(v) for v in values)


def _tiled_text(pb) -> str:
    text = f"devices=[{_ints(pb.tile_assignment_dimensions)}]"
    if pb.iota_reshape_dims:
        text += f"<=[{_ints(pb.iota_reshape_dims)}]"
        if pb.iota_transpose_perm:
            text += f"T({_ints(pb.iota_transpose_perm)})"
    else:
        text += _ints(pb.tile_assignment_devices)
    if pb.replicate_on_last_tile_dim:
        text += " last_tile_dim_replicate"
    if pb.last_tile_dims:
        names = []
        for t in pb.last_tile_dims:
            if t not in _SIMPLE:
                raise MalformedProto(f"invalid last_tile_dims type {t}")
            names.append(_SIMPLE[t])
        text += " last_tile_dims={" + ", ".join(names) + "}"
    return text


def _body(pb) -> str:
    if pb.type in _SIMPLE:
        return _SIMPLE[pb.type]
    if pb.type == _Type.MAXIMAL:
        if len(pb.tile_assignment_devices) != 1:
            raise MalformedProto("maximal sharding must name exactly one device")
        return f"maximal device={pb.tile_assignment_devices[0]}"
    if pb.type == _Type.OTHER:
        return _tiled_text(pb)
    raise MalformedProto(f"invalid sharding type {pb.type}")


def sharding_to_text(pb: xla_data_pb2.OpSharding) -> str:
    """The HLO text spelling of an OpSharding, braces included."""
    if pb.type == _Type.TUPLE:
        return "{" + ", ".join(sharding_to_text(e) for e in pb.tuple_shardings) + "}"
    return "{" + _body(pb) + "}"


# ---- text -> proto ---------------------------------------------------------------------------
_TILED = re.compile(
    r"devices=\[([\d,]*)\]\s*(?:<=\[([\d,]*)\](?:T\(([\d,]*)\))?|([\d,]*))"
    r"(\s+last_tile_dim_replicate)?(?:\s+last_tile_dims=\{([\w,\s]*)\})?$"
)


def _split_top(text: str) -> list[str]:
    """Split a tuple sharding's inside at top-level commas."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _nums(text: str | None) -> list[int]:
    return [int(v) for v in text.split(",") if v] if text else []


def _fill_tiled(match: re.Match, out) -> None:
    out.type = _Type.OTHER
    out.tile_assignment_dimensions.extend(_nums(match.group(1)))
    if match.group(2) is not None:
        out.iota_reshape_dims.extend(_nums(match.group(2)))
        out.iota_transpose_perm.extend(_nums(match.group(3)))
    else:
        out.tile_assignment_devices.extend(_nums(match.group(4)))
    out.replicate_on_last_tile_dim = bool(match.group(5))
    if match.group(6):
        for name in match.group(6).split(","):
            out.last_tile_dims.append(_SIMPLE_BY_TEXT[name.strip()])


def sharding_from_text(
    text: str, out: xla_data_pb2.OpSharding | None = None
) -> xla_data_pb2.OpSharding:
    """Parse the text form back into an OpSharding; ValueError if it is not one we write."""
    pb = out if out is not None else xla_data_pb2.OpSharding()
    inner = text.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise ValueError(f"malformed sharding {text!r}")
    inner = inner[1:-1].strip()
    if inner.startswith("{") or not inner:
        pb.type = _Type.TUPLE
        for part in _split_top(inner):
            sharding_from_text(part, pb.tuple_shardings.add())
        return pb
    if inner in _SIMPLE_BY_TEXT:
        pb.type = _SIMPLE_BY_TEXT[inner]
        return pb
    maximal = re.fullmatch(r"maximal\s+device=(\d+)", inner)
    if maximal:
        pb.type = _Type.MAXIMAL
        pb.tile_assignment_dimensions.append(1)  # XLA's shape of a one-device assignment
        pb.tile_assignment_devices.append(int(maximal.group(1)))
        return pb
    tiled = _TILED.fullmatch(inner)
    if tiled is None:
        raise ValueError(f"unsupported sharding {text!r}")
    _fill_tiled(tiled, pb)
    return pb
