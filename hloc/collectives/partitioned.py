"""Refuse modules that are not SPMD-partitioned yet, with the way to get the partitioned one."""

from __future__ import annotations

import re

from hloc.errors import InputError, UnsupportedError
from hloc.ir import Module
from hloc.ir.opcodes import Opcode as O

# Markers the partitioner consumes: Shardy's custom-calls and GSPMD's manual-sharding ones.
_UNPARTITIONED_TARGETS = ("xla.sdy.", "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")
_DEVICE_OPS = frozenset({
    O.ALL_REDUCE, O.ALL_REDUCE_START, O.ALL_GATHER, O.ALL_GATHER_START, O.REDUCE_SCATTER,
    O.ALL_TO_ALL, O.COLLECTIVE_PERMUTE, O.COLLECTIVE_PERMUTE_START, O.COLLECTIVE_BROADCAST,
    O.PARTITION_ID, O.REPLICA_ID, O.ASYNC_START})

# An axis of a Shardy mesh, `#sdy.mesh<["data"=2, "model"=2]>`: its size.
_MESH_AXIS = re.compile(r'"[^"]*"\s*=\s*(\d+)')

HOW_TO_PARTITION = (
    "pass the partitioned module instead: XLA's optimized module "
    "(jax.jit(f).lower(...).compile().runtime_executable().hlo_modules()[0]) or the dump after "
    "spmd-partitioning (XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_pass_re=spmd-partitioning "
    "--xla_dump_hlo_as_proto')")


def _multi_device_mesh(module: Module) -> bool:
    """A Shardy mesh attribute with an axis of more than one device. XLA partitions only
    when there are several devices: a one-device module keeps its `"data"=1` mesh, and is
    ready to run as it is."""
    return any(int(size) > 1 for k, v in module.frontend_attributes if k.startswith("xla.sdy.")
               for size in _MESH_AXIS.findall(v))


def unpartitioned_reason(module: Module) -> str | None:
    """Why `module` still needs SPMD partitioning, or None when it is ready to run."""
    if _multi_device_mesh(module):
        return "it carries a Shardy mesh (xla.sdy.meshes)"
    instrs = [i for c in module.computations for i in c.instructions]
    for i in instrs:
        target = i.attrs.custom_call_target or ""
        if i.opcode == O.CUSTOM_CALL and target.startswith(_UNPARTITIONED_TARGETS):
            return f"it has sharding custom-calls ({target})"
    if module.config.num_partitions <= 1 or any(i.opcode in _DEVICE_OPS for i in instrs):
        return None
    # Partitioning leaves shardings on the entry parameters only; tiled shardings on other
    # instructions, with no collective or partition-id anywhere, mean global shapes.
    annotated = [i for i in instrs if i.opcode != O.PARAMETER and "devices=" in (i.attrs.sharding or "")]
    if annotated:
        return f"it has sharding annotations (%{annotated[0].name}) but no collectives"
    return None


def check_partitioned(module: Module, path: str | None = None) -> None:
    """InputError (exit 2) in one line if `module` is not SPMD-partitioned yet."""
    reason = unpartitioned_reason(module)
    if reason is not None:
        raise InputError(f"module {module.name} is not SPMD-partitioned yet ({reason}); "
                         f"{HOW_TO_PARTITION}", path)


def check_collectives(module: Module) -> None:
    """UnsupportedError naming the first collective form no runtime executes: the in-place
    collective-permute (several operands, with input/output offsets)."""
    for comp in module.computations:
        for i in comp.instructions:
            if i.opcode in (O.COLLECTIVE_PERMUTE, O.COLLECTIVE_PERMUTE_START) and len(i.operands) > 1:
                raise UnsupportedError(f"collective-permute %{i.name} with {len(i.operands)} "
                                       "operands (in-place form) is not supported")
