"""A multi-device bundle run by the ranks of an MPI job, one device per rank.

Rank i runs the i-th device of the module's device assignment in replica-major order
(`DeviceGrid.devices()`), so the job must have exactly `replica_count x num_partitions` ranks.
`RankExecutable` is what `hlo-run` uses on every rank: like a one-device Executable, `run`
takes the GLOBAL arguments (on rank 0; None elsewhere) and returns the GLOBAL outputs (on rank
0; None elsewhere). Rank 0 shards the arguments by the parameter shardings and scatters them;
each rank runs its device; rank 0 gathers the outputs and assembles them by the output
sharding. Before anything runs, the ranks compare a digest of the bundle and the run options
(`MpiCommunicator.check_same`) and create the groups' sub-communicators.

What runs a rank's device is a registry by device kind: `RANK_RUNNERS[kind](bundle, ctx,
module=...)` returns an object with `run(args) -> outputs` and `run_profiled(args) ->
(outputs, rows)` on that device's own arguments, where `ctx` (hloc.collectives.DeviceContext)
carries the device, the grid and the MPI communicator. The interpreter registers here; a
runtime with collective thunks (cpu, cuda-emulated) registers its own runner
(`@register_rank_runner("cpu")`), whose collective thunks call
`hloc.collectives.run_collective(instr, operands, ctx)`, or, to reduce straight into their
result buffers, `ctx.comm.all_reduce(ctx.key(instr), group, ctx.device_id, operands,
reducer, out=buffers)` (and `all_gather(..., out=)`), with the group from
`hloc.collectives.instruction_participants`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Callable

import numpy as np

from ..collectives import DeviceContext, DeviceGrid, bind
from ..collectives.groups import group_partitions
from ..collectives.mpi import MpiCommunicator, import_mpi
from ..errors import CheckFailed, HlocError, InputError, UnsupportedError
from ..registry import Registry
from .executable import InterpreterExecutable
from .spmd import assemble_outputs, global_signature, shard_inputs

# Environment variables MPI launchers set to the job's size and this process's rank
# (MPICH hydra, Open MPI, PMIx).
_SIZE_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")
_RANK_ENV = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")

# device kind -> factory(bundle, ctx) -> the runner of one rank's device
RANK_RUNNERS: Registry[str, Callable] = Registry(
    "multi-device rank runner", modules=("hloc.runtime.native_ranks",))
# Decorator: `@register_rank_runner("cpu")` registers a rank's device runner factory.
register_rank_runner = RANK_RUNNERS.register


def _env_int(names) -> int | None:
    for name in names:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return None


def launched_size() -> int | None:
    """The MPI job's size when this process was started by an MPI launcher, else None."""
    return _env_int(_SIZE_ENV)


def launched_rank() -> int:
    """This process's rank in the MPI job (0 outside one)."""
    return _env_int(_RANK_ENV) or 0


def on_all_ranks(error: HlocError) -> HlocError:
    """Mark `error` as raised identically by every rank: rank 0 alone reports it (`quiet` on
    the others, which hloc.cli.common.guarded honours), nobody aborts."""
    error.all_ranks = True
    error.quiet = launched_rank() != 0
    return error


@register_rank_runner("interpreter")
class InterpreterRank(InterpreterExecutable):
    """One device of a multi-device bundle on the reference interpreter."""

    def __init__(self, bundle, ctx: DeviceContext, module=None):
        super().__init__(bundle, module)
        self.ctx = ctx

    def run(self, args):
        from .interpreter import evaluate

        bind(self.ctx)
        try:
            return evaluate(self.module, args).flatten()
        finally:
            bind(None)

    def run_profiled(self, args):
        bind(self.ctx)
        try:
            return super().run_profiled(args)
        finally:
            bind(None)


def _digest(bundle, options: str) -> str:
    h = hashlib.sha256(bytes(bundle.module_proto))
    h.update(json.dumps(bundle.manifest, sort_keys=True, default=str).encode())
    return f"{h.hexdigest()} {options}"


class RankExecutable:
    """This process's rank of a multi-device bundle run (see the module docstring)."""

    def __init__(self, bundle, device: str, *, deterministic: bool = False,
                 timeout: float = 300.0, options: str = "", module=None):
        MPI = import_mpi()
        self.world = MPI.COMM_WORLD
        self.rank, self.size = self.world.Get_rank(), self.world.Get_size()
        self.is_root = self.rank == 0
        self.bundle, self.device = bundle, device
        self.module = module or InterpreterExecutable(bundle).module
        self.grid = DeviceGrid.of(self.module.config)
        if self.size != self.grid.count:
            raise on_all_ranks(InputError(
                f"the bundle runs on {self.grid.count} devices but the MPI job has {self.size} "
                f"ranks (use --processes {self.grid.count} or mpiexec -n {self.grid.count})",
                bundle.path))
        factory = RANK_RUNNERS.get(device)
        if factory is None:
            raise on_all_ranks(UnsupportedError(
                f"device '{device}' cannot run multi-device bundles yet (it needs collective "
                f"thunks); compile with --target interpreter or run with --device interpreter"))
        devices = self.grid.devices()
        self.comm = MpiCommunicator(self.world, [self.grid.device_id(d) for d in devices],
                                    deterministic=deterministic, timeout=timeout)
        self._all_ranks(lambda: self.comm.check_same("bundle or options", _digest(bundle, options)))
        self.comm.prepare(group_partitions(self.module, self.grid))
        self.ctx = DeviceContext(self.grid, devices[self.rank], self.comm)
        self.local = factory(bundle, self.ctx, module=self.module)
        self._global_args: object = None
        self._local_args: list | None = None

    @staticmethod
    def _all_ranks(fn):
        try:
            return fn()
        except InputError as e:
            raise on_all_ranks(e) from None

    def signature(self, signature):
        """The CLI's entry signature with GLOBAL shapes."""
        return global_signature(signature, self.module)

    def run(self, args):
        """GLOBAL outputs on rank 0 (None on the others) from GLOBAL `args` (rank 0's)."""
        return self._collect(self.local.run(self._distribute(args)))

    def run_profiled(self, args):
        outs, rows = self.local.run_profiled(self._distribute(args))
        return self._collect(outs), rows

    def _distribute(self, args) -> list:
        # Rank 0 shards once per distinct argument list; repeated runs (--benchmark) reuse it.
        reuse, error, per_rank = False, None, None
        if self.is_root:
            reuse = args is self._global_args
            if not reuse:
                try:
                    shards = shard_inputs(self.module, args)
                    per_rank = [shards[d] for d in self.grid.devices()]
                except InputError as e:
                    error = str(e)
        reuse, error = self.world.bcast((reuse, error), root=0)
        if error:
            raise on_all_ranks(InputError(error))
        if not reuse:
            self._local_args = self.world.scatter(per_rank, root=0)
            self._global_args = args
        return self._local_args

    def _collect(self, outputs):
        gathered = self.world.gather([np.asarray(o) for o in outputs], root=0)
        if not self.is_root:
            return None
        results = dict(zip(self.grid.devices(), gathered, strict=True))
        return assemble_outputs(self.module, results)

    def collective_times(self) -> list[tuple[int, float]] | None:
        """(count, seconds) of collectives so far, per rank, on rank 0 (None elsewhere)."""
        return self.world.gather((self.comm.count, self.comm.seconds), root=0)

    def collectives_summary(self) -> dict | None:
        """How this rank's collective thunks run (hloc.runtime.cuda.nccl's summary: NCCL or
        host-staged, per thunk), or None: all through the MPI communicator."""
        engine = getattr(self.local, "collectives", None)
        return engine.summary() if engine is not None else None

    def barrier(self) -> None:
        self.comm.check_same("barrier", "")


def open_ranks(bundle_path: str, device: str | None, *, deterministic: bool, timeout: float,
               options: str = "", trusted_keys: list[str] | None = None
               ) -> RankExecutable | None:
    """A RankExecutable when this process is a rank of an MPI job and the bundle has several
    devices; None for a one-device bundle in a one-rank job (run it as usual). The bundle is
    verified (`trusted_keys`) and validated as `runtime.load` does, before any member is used."""
    from ..bundle import read_bundle
    from ..bundle.signing import verify_bundle
    from ..bundle.validate import validate_bundle
    from .executable import default_device

    size = launched_size() or 1
    try:
        import_mpi()
    except HlocError as e:
        raise on_all_ranks(e) from None
    try:  # every rank reads the same file: a bad bundle is an error they all share
        bundle = read_bundle(bundle_path)
        if trusted_keys:
            verify_bundle(bundle, trusted_keys)
        validate_bundle(bundle)
    except HlocError as e:
        raise on_all_ranks(e) from None
    module = InterpreterExecutable(bundle).module
    count = module.config.device_count
    if count == 1 and size == 1:
        return None
    if count == 1:
        raise on_all_ranks(InputError(
            f"the bundle runs on one device but the MPI job has {size} ranks", bundle_path))
    device = device or default_device(bundle.manifest["target"]["kind"])
    return RankExecutable(bundle, device, deterministic=deterministic, timeout=timeout,
                          options=options, module=module)


@contextlib.contextmanager
def rank_errors(prog: str = "hlo-run"):
    """Errors on one rank end the whole job: a failure every rank shares (`on_all_ranks`) and a
    failed check on rank 0 exit normally, reported by rank 0; any other failure prints one
    line naming the rank and aborts the job (MPI_Abort), so no peer waits for it."""
    try:
        yield
    except HlocError as e:
        if getattr(e, "all_ranks", False) or isinstance(e, CheckFailed):
            raise
        _abort(prog, f"error: rank {launched_rank()}: {e}", e.exit_code)
    except KeyboardInterrupt:
        _abort(prog, "interrupted", 130)
    except Exception as e:  # noqa: BLE001 - the contract's exit 3, for the whole job
        _abort(prog, f"internal error: rank {launched_rank()}: {type(e).__name__}: {e}", 3)


def _abort(prog: str, line: str, code: int) -> None:
    print(f"{prog}: {line}", file=sys.stderr, flush=True)
    if (launched_size() or 1) > 1:
        import_mpi().COMM_WORLD.Abort(code)
    sys.exit(code)
