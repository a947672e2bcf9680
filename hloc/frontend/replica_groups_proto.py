"""Iota and mesh-axes replica group lists <-> their HloInstructionProto messages."""

from __future__ import annotations

from hloc.ir.replica_groups import (
    IotaReplicaGroups,
    MeshAxisRef,
    MeshReplicaGroups,
    ReplicaGroupList,
)

from .shape_proto import MalformedProto


def iota_from_proto(pb) -> IotaReplicaGroups:
    try:
        return IotaReplicaGroups(pb.num_replica_groups, pb.num_devices_per_group,
                                 tuple(pb.iota_reshape_dims), tuple(pb.iota_transpose_perm))
    except ValueError as e:
        raise MalformedProto(str(e)) from None


def _mesh_device_ids(mesh) -> tuple[int, ...]:
    import numpy as np

    if mesh.device_ids:
        return tuple(mesh.device_ids)
    if not mesh.HasField("iota_transform"):
        return ()
    t = mesh.iota_transform
    dims = tuple(t.reshape_dims)
    ids = np.arange(int(np.prod(dims))).reshape(dims).transpose(tuple(t.transpose_perm) or None)
    return tuple(int(v) for v in ids.reshape(-1))


def mesh_from_proto(pb) -> MeshReplicaGroups:
    """A MeshAxesReplicaGroupListProto (MeshProto + AxisRefProto list, xla_data.proto)."""
    mesh = pb.mesh
    if not mesh.axes:
        raise MalformedProto("mesh_axes_replica_group_list: the mesh has no axes")
    axes = tuple(MeshAxisRef(a.mesh_axis_index, a.sub_axis_info.pre_size, a.sub_axis_info.size)
                 if a.HasField("sub_axis_info") else MeshAxisRef(a.mesh_axis_index)
                 for a in pb.axes)
    try:
        return MeshReplicaGroups(tuple(a.name for a in mesh.axes), tuple(a.size for a in mesh.axes),
                                 axes, _mesh_device_ids(mesh))
    except ValueError as e:
        raise MalformedProto(str(e)) from None


def group_list_from_proto(pb) -> ReplicaGroupList | None:
    which = pb.WhichOneof("replica_group_list")
    if which == "iota_collective_device_list":
        return iota_from_proto(pb.iota_collective_device_list)
    if which == "mesh_axes_replica_group_list":
        return mesh_from_proto(pb.mesh_axes_replica_group_list)
    return None


def group_list_to_proto(form: ReplicaGroupList, pb) -> None:
    if isinstance(form, IotaReplicaGroups):
        out = pb.iota_collective_device_list
        out.num_replica_groups, out.num_devices_per_group = form.num_groups, form.group_size
        out.iota_reshape_dims.extend(form.reshape_dims)
        out.iota_transpose_perm.extend(form.transpose_perm)
        return
    out = pb.mesh_axes_replica_group_list
    for name, size in zip(form.axis_names, form.axis_sizes, strict=True):
        out.mesh.axes.add(name=name, size=size)
    out.mesh.device_ids.extend(form.device_ids)
    for ref in form.axes:
        axis = out.axes.add(mesh_axis_index=ref.index)
        if ref.pre_size:
            axis.sub_axis_info.pre_size, axis.sub_axis_info.size = ref.pre_size, ref.size
