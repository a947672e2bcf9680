"""Multi-device module fields: DeviceAssignmentProto and the SPMD parameter/output shardings."""

from __future__ import annotations

from hloc.ir import Module

from .shape_proto import MalformedProto
from .sharding import sharding_from_text, sharding_to_text


def device_assignment_from_proto(pb) -> tuple[tuple[int, ...], ...]:
    """DeviceAssignmentProto (computation-major) -> [replica][partition] device ids."""
    replicas, parts = pb.replica_count, pb.computation_count
    devices = [tuple(c.replica_device_ids) for c in pb.computation_devices]
    if len(devices) != parts or any(len(d) != replicas for d in devices):
        raise MalformedProto(f"device_assignment: {len(devices)} computations for "
                             f"computation_count={parts} x replica_count={replicas}")
    return tuple(tuple(devices[p][r] for p in range(parts)) for r in range(replicas))


def device_assignment_to_proto(assignment: tuple[tuple[int, ...], ...], out) -> None:
    out.replica_count, out.computation_count = len(assignment), len(assignment[0])
    for p in range(len(assignment[0])):
        out.computation_devices.add().replica_device_ids.extend(row[p] for row in assignment)


def apply_device_assignment(pb, module: Module) -> None:
    """Take replica_count / num_partitions from a (non-empty) DeviceAssignmentProto."""
    if not pb.computation_devices:
        return
    module.config.device_assignment = device_assignment_from_proto(pb)
    module.config.replica_count = pb.replica_count
    module.config.num_partitions = pb.computation_count


def import_spmd_fields(pb, module: Module) -> None:
    """HloModuleProto's device_assignment and spmd_* shardings."""
    if pb.HasField("device_assignment"):
        apply_device_assignment(pb.device_assignment, module)
    if pb.spmd_parameters_shardings:
        module.config.spmd_parameter_shardings = tuple(
            sharding_to_text(s) for s in pb.spmd_parameters_shardings)
    if pb.HasField("spmd_output_sharding"):
        module.config.spmd_output_sharding = sharding_to_text(pb.spmd_output_sharding)


def export_spmd_fields(module: Module, pb) -> None:
    config = module.config
    assignment = config.device_assignment
    if assignment is None and config.device_count > 1:
        # HloModuleProto has no replica_count / num_partitions: the assignment carries them.
        assignment = tuple(tuple(r * config.num_partitions + p for p in range(config.num_partitions))
                           for r in range(config.replica_count))
    if assignment is not None:
        device_assignment_to_proto(assignment, pb.device_assignment)
    for text in config.spmd_parameter_shardings or ():
        sharding_from_text(text, pb.spmd_parameters_shardings.add())
    if config.spmd_output_sharding is not None:
        sharding_from_text(config.spmd_output_sharding, pb.spmd_output_sharding)
