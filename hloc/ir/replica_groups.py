"""The compact encodings of a collective's replica groups: iota lists and mesh-axes lists.

`Attrs.replica_groups` always holds the expanded groups (explicit lists of ids), which is what
every consumer reads. When a module gave the groups as an iota list (`[2,2]<=[2,2]T(1,0)`,
proto `iota_collective_device_list`) or a mesh-axes list (`mesh['x'=2,'y'=2] {'y'}`, proto
`mesh_axes_replica_group_list`), `Attrs.replica_group_list` keeps that encoding too, so the
printer and the proto exporter write back what was read.

Mesh-axes expansion follows XLA's MeshAxesReplicaGroupList: reshape the mesh's device array to
the axis sizes (splitting an axis where sub-axes `'a':(pre)size` refer to parts of it), move
the grouped axes to the end in the order listed, and cut the result into groups.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from ..util.record import dataclass

if TYPE_CHECKING:
    import numpy as np

Groups = tuple[tuple[int, ...], ...]


def _rows(ids: np.ndarray, size: int) -> Groups:
    return tuple(tuple(int(v) for v in row) for row in ids.reshape(-1, size))


@dataclass(frozen=True)
class IotaReplicaGroups:
    """`[num_groups,group_size]<=[reshape_dims]T(transpose_perm)`: a transposed iota, cut in rows."""

    num_groups: int
    group_size: int
    reshape_dims: tuple[int, ...]
    transpose_perm: tuple[int, ...] = ()

    def __post_init__(self):
        perm = self.transpose_perm or tuple(range(len(self.reshape_dims)))
        if sorted(perm) != list(range(len(self.reshape_dims))):
            raise ValueError(f"iota replica groups: {perm} is not a permutation")
        if math.prod(self.reshape_dims) != self.num_groups * self.group_size:
            raise ValueError("iota replica groups: reshape dims do not hold groups x size ids")

    def groups(self) -> Groups:
        import numpy as np

        perm = self.transpose_perm or tuple(range(len(self.reshape_dims)))
        ids = np.arange(math.prod(self.reshape_dims)).reshape(self.reshape_dims).transpose(perm)
        return _rows(ids, self.group_size)

    def text(self) -> str:
        out = f"[{self.num_groups},{self.group_size}]<=[{_ints(self.reshape_dims)}]"
        perm = self.transpose_perm
        if perm and perm != tuple(range(len(perm))):
            out += f"T({_ints(perm)})"
        return out


@dataclass(frozen=True)
class MeshAxisRef:
    """One grouped axis: a whole mesh axis, or the sub-axis `(pre_size)size` of it."""

    index: int
    pre_size: int = 0  # 0: the whole axis
    size: int = 0


@dataclass(frozen=True)
class MeshReplicaGroups:
    """`mesh['a'=2,'b'=2] {'b'}`: the devices of a named mesh grouped over some of its axes."""

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    axes: tuple[MeshAxisRef, ...]
    device_ids: tuple[int, ...] = ()  # empty: iota over the mesh

    def __post_init__(self):
        for ax in self.axes:
            if not 0 <= ax.index < len(self.axis_sizes):
                raise ValueError(f"mesh replica groups: no mesh axis {ax.index}")
            if ax.pre_size and self.axis_sizes[ax.index] % (ax.pre_size * ax.size):
                raise ValueError("mesh replica groups: sub-axis does not divide its axis")
        if self.device_ids and len(self.device_ids) != math.prod(self.axis_sizes):
            raise ValueError("mesh replica groups: device_ids do not fill the mesh")

    def group_size(self) -> int:
        return math.prod(ax.size if ax.pre_size else self.axis_sizes[ax.index] for ax in self.axes)

    def groups(self) -> Groups:
        import numpy as np

        sizes, grouped = self._reindexed()
        count = math.prod(self.axis_sizes)
        ids = np.array(self.device_ids) if self.device_ids else np.arange(count)
        rest = [i for i in range(len(sizes)) if i not in grouped]
        return _rows(ids.reshape(sizes).transpose(rest + grouped), self.group_size())

    def _reindexed(self) -> tuple[list[int], list[int]]:
        """Axis sizes with sub-axes split out, and the positions of the grouped (sub-)axes."""
        sizes: list[int] = []
        grouped: dict[MeshAxisRef, int] = {}
        for i, full in enumerate(self.axis_sizes):
            refs = sorted((a for a in self.axes if a.index == i), key=lambda a: a.pre_size)
            if not refs:
                sizes.append(full)
                continue
            if not refs[0].pre_size:
                grouped[refs[0]] = len(sizes)
                sizes.append(full)
                continue
            covered = 1
            for ref in refs:  # pad between sub-axes so each sits at its pre-size
                if ref.pre_size != covered:
                    sizes.append(ref.pre_size // covered)
                    covered = ref.pre_size
                grouped[ref] = len(sizes)
                sizes.append(ref.size)
                covered *= ref.size
            if covered != full:
                sizes.append(full // covered)
        return sizes, [grouped[a] for a in self.axes]

    def text(self) -> str:
        mesh = ",".join(f"'{n}'={s}" for n, s in zip(self.axis_names, self.axis_sizes, strict=True))
        ids = f", device_ids=({_ints(self.device_ids)})" if self.device_ids else ""
        refs = ",".join(self._ref_text(a) for a in self.axes)
        return f"mesh[{mesh}]{ids} {{{refs}}}"

    def _ref_text(self, ref: MeshAxisRef) -> str:
        name = f"'{self.axis_names[ref.index]}'"
        return name + (f":({ref.pre_size}){ref.size}" if ref.pre_size else "")


ReplicaGroupList = IotaReplicaGroups | MeshReplicaGroups


def _ints(values) -> str:
    return ",".join(str(v) for v in values)


# ---- text -----------------------------------------------------------------------------------------
MESH_GROUPS = re.compile(
    r"mesh\[([^\]]*)\](?:\s*,\s*device_ids=\(([^)]*)\))?\s*\{([^}]*)\}")
_MESH_AXIS = re.compile(r"\s*'?([^'=,\s]+)'?\s*=\s*(\d+)\s*")
_AXIS_REF = re.compile(r"\s*'?([^':,\s]+)'?\s*(?::\s*\((\d+)\)\s*(\d+))?\s*")


def mesh_groups_from_text(mesh: str, device_ids: str | None, refs: str) -> MeshReplicaGroups:
    """Build from the three parts MESH_GROUPS captures; ValueError if they are malformed."""
    names, sizes = [], []
    for part in mesh.split(","):
        m = _MESH_AXIS.fullmatch(part)
        if m is None:
            raise ValueError(f"malformed mesh axis {part.strip()!r}")
        names.append(m.group(1))
        sizes.append(int(m.group(2)))
    axes = []
    for part in filter(str.strip, refs.split(",")):
        m = _AXIS_REF.fullmatch(part)
        if m is None or m.group(1) not in names:
            raise ValueError(f"unknown mesh axis reference {part.strip()!r}")
        pre, size = (int(m.group(2)), int(m.group(3))) if m.group(2) else (0, 0)
        axes.append(MeshAxisRef(names.index(m.group(1)), pre, size))
    ids = tuple(int(v) for v in re.findall(r"\d+", device_ids or ""))
    return MeshReplicaGroups(tuple(names), tuple(sizes), tuple(axes), ids)
