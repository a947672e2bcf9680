"""Multi-device collectives, independent of any target or transport.

- `groups`: XLA's group modes and device-assignment mapping (who takes part, in what order)
- `reducers`: all-reduce `to_apply` computations as standard kinds or elementwise evaluation
- `semantics`: what each participant gets, given every participant's value
- `communicator`: the Communicator interface and the in-process (threads) implementation
- `mpi`: the MPI implementation (mpi4py, imported on first use; `pip install 'hloc[dist]'`)
- `execute`: one collective instruction on one device (DeviceContext, run_collective)
- `sharding`: global array <-> per-device shards by an OpSharding
- `partitioned`: refuse modules that are not SPMD-partitioned yet
"""

from .communicator import CollectiveError, Communicator, InProcessCommunicator
from .execute import DeviceContext, bind, current, run_collective
from .groups import DeviceGrid, GroupMode, group_mode, instruction_participants, participants
from .partitioned import check_collectives, check_partitioned, unpartitioned_reason
from .reducers import Reducer, reducer_of
from .sharding import Sharding, assemble, parse_sharding, shard, shard_shape

__all__ = [
    "CollectiveError", "Communicator", "DeviceContext", "DeviceGrid", "GroupMode",
    "InProcessCommunicator", "Reducer", "Sharding", "assemble", "bind", "check_collectives", "check_partitioned",
    "current", "group_mode", "instruction_participants", "parse_sharding", "participants",
    "reducer_of", "run_collective", "shard", "shard_shape", "unpartitioned_reason",
]
