"""Shardings as data: split a global array into each device's shard, and assemble outputs.

Reads the HLO text form of an OpSharding (what `Attrs.sharding` and ModuleConfig's spmd_*
fields hold): `{replicated}`, `{maximal device=N}`, `{manual}`, tiled `{devices=[2,1]0,1}` /
`{devices=[2,2]<=[4]}` / `<=[2,2]T(1,0)` with `last_tile_dim_replicate` or `last_tile_dims={..}`,
and tuples. Tile-assignment ids are partition numbers. XLA pads uneven shards at the end;
`shard` pads with zeros and `assemble` drops the padding.
"""

from __future__ import annotations

import math
import re

import numpy as np

from hloc.errors import InputError

from ..util.record import dataclass


@dataclass(frozen=True)
class Sharding:
    """One parsed sharding: kind plus, for tiled ones, the tile assignment array."""

    kind: str  # replicated | maximal | manual | tiled | tuple (unknown/unreduced read as replicated)
    tiles: np.ndarray | None = None  # partition ids; trailing `replicated_dims` dims replicate
    replicated_dims: int = 0
    device: int = 0  # maximal: the partition holding the value
    elements: tuple[Sharding, ...] = ()

    def leaves(self) -> list[Sharding]:
        """Tuple shardings flattened depth-first (the order of the flattened outputs)."""
        if self.kind != "tuple":
            return [self]
        return [leaf for e in self.elements for leaf in e.leaves()]

    def tile_counts(self, rank: int) -> tuple[int, ...]:
        if self.kind != "tiled":
            return (1,) * rank
        return tuple(self.tiles.shape[:rank])


REPLICATED = Sharding("replicated")
_TILED = re.compile(r"devices=\[([\d,\s]*)\]\s*(?:<=\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?|([\d,\s]*?))"
                    r"(\s+last_tile_dim_replicate)?(?:\s+last_tile_dims=\{([^}]*)\})?\s*$")


def _nums(text: str | None) -> list[int]:
    return [int(v) for v in re.findall(r"\d+", text or "")]


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def leaf_texts(text: str) -> list[str]:
    """A sharding's text per leaf: a tuple sharding's elements flattened depth-first, any
    other sharding as given (metadata dropped from tuples' elements)."""
    inner = text.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise InputError(f"malformed sharding {text!r}")
    body = re.sub(r"\s*metadata=\{.*\}\s*$", "", inner[1:-1].strip())
    if body and not body.startswith("{"):
        return [inner]
    return [leaf for part in _split_top(body) for leaf in leaf_texts(part)]


def _tiled(m: re.Match) -> Sharding:
    dims = _nums(m.group(1))
    if m.group(2) is not None:
        reshape = _nums(m.group(2))
        perm = _nums(m.group(3)) or list(range(len(reshape)))
        ids = np.arange(math.prod(reshape)).reshape(reshape).transpose(perm)
    else:
        ids = np.array(_nums(m.group(4)))
    if ids.size != math.prod(dims):
        raise ValueError(f"tile assignment has {ids.size} devices for tiles {dims}")
    extra = 1 if m.group(5) else len([t for t in (m.group(6) or "").split(",") if t.strip()])
    return Sharding("tiled", ids.reshape(dims), extra)


def parse_sharding(text: str | None) -> Sharding:
    """A Sharding from its text form (None or empty: replicated); InputError if malformed."""
    if not text:
        return REPLICATED
    inner = text.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise InputError(f"malformed sharding {text!r}")
    inner = re.sub(r"\s*metadata=\{.*\}\s*$", "", inner[1:-1].strip())
    if inner.startswith("{") or not inner:
        return Sharding("tuple", elements=tuple(parse_sharding(p) for p in _split_top(inner)))
    if inner in ("replicated", "unknown", "unreduced"):
        return REPLICATED
    if inner == "manual":
        return Sharding("manual")
    maximal = re.fullmatch(r"maximal\s+device=(\d+)", inner)
    if maximal:
        return Sharding("maximal", device=int(maximal.group(1)))
    m = _TILED.fullmatch(inner)
    try:
        if m is None:
            raise ValueError("unsupported form")
        return _tiled(m)
    except ValueError as e:
        raise InputError(f"sharding {text!r}: {e}") from None


def _tile_index(s: Sharding, partition: int, rank: int) -> tuple[int, ...]:
    found = np.argwhere(s.tiles == partition)
    if not len(found):
        raise InputError(f"partition {partition} holds no tile of sharding {s.tiles.tolist()}")
    return tuple(int(v) for v in found[0][:rank])


def shard_shape(global_shape, s: Sharding) -> tuple[int, ...]:
    """The per-device shape of a value of `global_shape` (XLA rounds uneven tiles up)."""
    counts = s.tile_counts(len(global_shape))
    return tuple(-(-d // c) for d, c in zip(global_shape, counts, strict=True))


def shard(value: np.ndarray, s: Sharding, partition: int) -> np.ndarray:
    """The part of the global `value` that `partition` holds."""
    value = np.asarray(value)
    if s.kind != "tiled":
        return value.copy()
    if s.tiles.ndim - s.replicated_dims != value.ndim:
        raise InputError(f"sharding with {s.tiles.ndim - s.replicated_dims} tiled dims for a "
                         f"rank-{value.ndim} array")
    index = _tile_index(s, partition, value.ndim)
    size = shard_shape(value.shape, s)
    part = value[tuple(slice(i * n, (i + 1) * n) for i, n in zip(index, size, strict=True))]
    if part.shape == size:
        return part.copy()
    out = np.zeros(size, value.dtype)
    out[tuple(slice(0, n) for n in part.shape)] = part
    return out


def assemble(parts: list[np.ndarray], s: Sharding, global_shape=None) -> np.ndarray:
    """The global value from every partition's part (`parts[p]` is partition p's)."""
    if s.kind == "maximal":
        return np.asarray(parts[s.device])
    if s.kind != "tiled":
        return np.asarray(parts[0])
    first = np.asarray(parts[0])
    counts = s.tile_counts(first.ndim)
    shape = tuple(global_shape) if global_shape is not None else \
        tuple(n * c for n, c in zip(first.shape, counts, strict=True))
    out = np.zeros(shape, first.dtype)
    for index in np.ndindex(*counts):
        owner = int(s.tiles[index + (0,) * s.replicated_dims])
        dst = tuple(slice(i * n, min((i + 1) * n, d))
                    for i, n, d in zip(index, first.shape, shape, strict=True))
        out[dst] = np.asarray(parts[owner])[tuple(slice(0, d.stop - d.start) for d in dst)]
    return out
