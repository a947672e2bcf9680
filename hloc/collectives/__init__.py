"""Multi-device collectives, independent of any target or transport.

- `groups`: XLA's group modes and device-assignment mapping (who takes part, in what order)
- `reducers`: all-reduce `to_apply` computations as standard kinds or elementwise evaluation
- `semantics`: what each participant gets, given every participant's value
- `communicator`: the Communicator interface and the in-process (threads) implementation
- `mpi`: the MPI implementation (mpi4py, imported on first use; `pip install 'hloc[dist]'`)
- `execute`: one collective instruction on one device (DeviceContext, run_collective)
- `sharding`: global array <-> per-device shards by an OpSharding
- `partitioned`: refuse modules that are not SPMD-partitioned yet

Names are exported lazily (PEP 562): a one-device compile needs only `check_collectives`, and
importing every submodule (threads, sharding, the executors) cost it ~10 ms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .communicator import CollectiveError, Communicator, InProcessCommunicator
    from .execute import DeviceContext, bind, current, run_collective
    from .groups import DeviceGrid, GroupMode, group_mode, instruction_participants, participants
    from .partitioned import check_collectives, check_partitioned, unpartitioned_reason
    from .reducers import Reducer, reducer_of
    from .sharding import Sharding, assemble, parse_sharding, shard, shard_shape

_EXPORTS = {
    "communicator": ("CollectiveError", "Communicator", "InProcessCommunicator"),
    "execute": ("DeviceContext", "bind", "current", "run_collective"),
    "groups": ("DeviceGrid", "GroupMode", "group_mode", "instruction_participants",
               "participants"),
    "partitioned": ("check_collectives", "check_partitioned", "unpartitioned_reason"),
    "reducers": ("Reducer", "reducer_of"),
    "sharding": ("Sharding", "assemble", "parse_sharding", "shard", "shard_shape"),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "CollectiveError", "Communicator", "DeviceContext", "DeviceGrid", "GroupMode",
    "InProcessCommunicator", "Reducer", "Sharding", "assemble", "bind", "check_collectives",
    "check_partitioned", "current", "group_mode", "instruction_participants", "parse_sharding",
    "participants", "reducer_of", "run_collective", "shard", "shard_shape",
    "unpartitioned_reason",
]


__getattr__ = lazy_exports(__name__, _HOME, globals())
