"""Device collectives of a GPU executable that is one rank of an MPI job.

`attach(executable, ctx, device)` decides, identically on every rank, how the executable's
Collective thunks run, and sets the runner's `collectives` (hloc.runtime.cuda.program):
- the NcclApi: `--device cuda` uses libnccl (binding.py) when every rank finds it and every
  rank has a GPU of its own (NCCL refuses two ranks on one GPU); `--device cuda-emulated`
  uses the emulation (emulated.py); HLOC_NCCL=off, or a rank without libnccl, leaves every
  collective host-staged (the latter says so once on stderr, from rank 0);
- per thunk, an NcclPlan or a HostStaged reason (plan.py);
- the communicators, created once before the first run, in an order derived from the module
  alone: the communicator of every rank (an id from rank 0, broadcast over MPI), then one
  per group of every way the module's collectives split the devices
  (hloc.collectives.groups.group_partitions): ncclCommSplit of the first when the library
  has it, else an id per group broadcast over the group's MPI communicator.
A planned thunk then runs as its NCCL calls on the device's current stream, with device
pointers; the others keep the host-staged path. Communicators live as long as the process.
"""

from __future__ import annotations

from typing import Any

from ....collectives import DeviceContext
from ....collectives.groups import group_partitions
from ....collectives.mpi import MpiCommunicator
from ....thunks.collectives import Collective
from ....util.log import get_logger
from .api import SPLIT_NOCOLOR, NcclApi, NcclError
from .binding import NCCL_ENV, Nccl, find_nccl, nccl_disabled
from .emulated import EmulatedNccl
from .plan import WORLD, HostStaged, NcclPlan, PlanContext, plan_collective

log = get_logger(__name__)
_MISSING = (f"libnccl.so.2 not found (pip install 'hloc[cuda]', or set {NCCL_ENV} to its "
            f"path)")


class DeviceCollectives:
    """Runs the Collective thunks that have an NcclPlan; `run` says False for the others."""

    def __init__(self, api: NcclApi | None, plans: dict[str, NcclPlan | HostStaged],
                 comms: dict[tuple[int, ...], Any], why: str = ""):
        self.api, self.plans, self.comms, self.why = api, plans, comms, why

    def run(self, r, thunk) -> bool:
        """Run `thunk` on runner `r`'s device as NCCL calls; False: not planned (host-staged)."""
        plan = self.plans.get(thunk.name)
        if self.api is None or not isinstance(plan, NcclPlan):
            return False
        api, device = self.api, r.device
        for s in plan.zeros:
            device.memset(s, 0)
        for src, dst in plan.copies:
            device.copy(src, dst)
        comm, stream = self.comms[plan.comm], device.stream_handle()
        if plan.grouped:
            api.group_start()
        for call in plan.calls:
            call.issue(api, comm, device.address, stream)
        if plan.grouped:
            api.group_end()
        error = api.comm_get_async_error(comm)
        if error:
            raise NcclError(f"{plan.opcode} %{thunk.name}: {api.error_string(error)}")
        return True

    def summary(self) -> dict:
        """What runs how: {"engine", "nccl": [thunks], "host_staged": {thunk: reason}}, and
        "reason" when no NCCL is used at all (every thunk host-staged for it)."""
        out: dict = {
            "engine": self.api.name if self.api is not None else "host-staged",
            "nccl": sorted(n for n, p in self.plans.items() if isinstance(p, NcclPlan)),
            "host_staged": {n: p.reason for n, p in sorted(self.plans.items())
                            if isinstance(p, HostStaged)},
        }
        if self.why:
            out["reason"] = self.why
        return out


def _api(device: str, executable, transport: MpiCommunicator) -> tuple[NcclApi | None, str]:
    """This rank's NcclApi for `device`, or (None, why not)."""
    if nccl_disabled():
        return None, f"{NCCL_ENV}=off"
    if device == "cuda-emulated":
        return EmulatedNccl(transport, executable.memory), ""
    lib = find_nccl()
    if lib is None:
        return None, _MISSING
    try:
        return Nccl(lib), ""
    except NcclError as e:
        return None, str(e)


def _gpu(executable, rank: int) -> str:
    identity = getattr(executable, "gpu_identity", None)
    return identity() if identity is not None else f"emulated device of rank {rank}"


def _agree(transport: MpiCommunicator, why: str, gpu: str) -> str:
    """Why the job leaves every collective host-staged (every rank gets the same answer):
    a rank's own reason, or ranks sharing a GPU; "" when NCCL serves them all."""
    votes = transport.world.allgather((why, gpu))
    why = next((w for w, _ in votes if w), "")
    gpus = [g for _, g in votes]
    if not why and len(set(gpus)) != len(gpus):
        why = "several ranks share a GPU (NCCL needs one GPU per rank; see HLOC_CUDA_DEVICE)"
    return why


def attach(executable, ctx: DeviceContext, device: str) -> DeviceCollectives | None:
    """Set up `executable`'s device collectives (see the module docstring); None when the job
    is not MPI or the program has no Collective thunk. Collective over the job's ranks."""
    transport = ctx.comm
    if not isinstance(transport, MpiCommunicator):
        return None
    thunks = [t for t in executable.program.walk() if isinstance(t, Collective)]
    if not thunks:
        return None
    api, why = _api(device, executable, transport)
    why = _agree(transport, why, _gpu(executable, transport.rank))
    if why:
        if device == "cuda" and transport.rank == 0 and why != f"{NCCL_ENV}=off":
            log.warning("--device cuda without NCCL: %s; collectives are staged through the "
                        "host", why)
        staged: dict[str, NcclPlan | HostStaged] = {
            t.name: HostStaged(t.name, t.op, why) for t in thunks}
        engine = DeviceCollectives(None, staged, {}, why)
    else:
        instructions = executable.runner.instructions
        pctx = PlanContext(ctx.grid, ctx.device, transport.rank_of, transport.deterministic)
        plans = {t.name: plan_collective(instructions[t.name], t, pctx) for t in thunks}
        comms = {}
        if any(isinstance(p, NcclPlan) for p in plans.values()):
            comms = create_communicators(api, transport, group_partitions(
                executable.module, ctx.grid))
        engine = DeviceCollectives(api, plans, comms)
        log.info("device collectives: %s", engine.summary())
    executable.runner.collectives = engine
    return engine


def create_communicators(api: NcclApi, transport: MpiCommunicator,
                         partitions) -> dict[tuple[int, ...], Any]:
    """WORLD (every rank, rank = MPI rank), then this rank's group of each partition (groups
    of global device ids; NCCL rank = position in the group). Collective over every rank."""
    world, rank = transport.world, transport.rank
    uid = world.bcast(api.get_unique_id() if rank == 0 else None, root=0)
    comms = {WORLD: api.comm_init_rank(world.Get_size(), uid, rank, world)}
    me = transport.device_ids[rank]
    for groups in partitions:
        ordered = sorted(tuple(g) for g in groups)
        mine = [i for i, g in enumerate(ordered) if me in g]
        color, key = (mine[0], ordered[mine[0]].index(me)) if mine else (SPLIT_NOCOLOR, 0)
        if api.can_split:
            comm = api.comm_split(comms[WORLD], color, key)
        else:
            comm = _init_group(api, transport, color, key, len(ordered[mine[0]]) if mine else 0)
        if not mine or comm is None:
            continue
        group = ordered[mine[0]]
        if group in comms:  # the same group in two partitions: one communicator serves
            api.comm_destroy(comm)
        else:
            comms[group] = comm
    return comms


def _init_group(api: NcclApi, transport: MpiCommunicator, color: int, key: int, size: int):
    """A group's communicator by ncclCommInitRank: its first member makes the unique id, sent
    to the others over the group's MPI communicator (collective over every rank)."""
    MPI = transport.MPI
    sub = transport.world.Split(color if color >= 0 else MPI.UNDEFINED, key)
    if sub == MPI.COMM_NULL:
        return None
    uid = sub.bcast(api.get_unique_id() if key == 0 else None, root=0)
    return api.comm_init_rank(size, uid, key, sub)

