"""A model of NCCL over MPI: the NcclApi of `--device cuda-emulated` under `--processes N`.

As the PTX emulator models the GPU, this models NCCL, so the mapping from HLO collectives to
NCCL calls (plan.py, engine.py) runs in CI, under a real mpiexec, with no GPU. "Device
pointers" are host addresses in the emulator's memory (hloc.runtime.cuda.emulated.HostMemory);
every buffer a call touches must lie inside one of its allocations (else NcclError, as CUDA
reports an illegal address). The bytes move with mpi4py.

What is modelled, as NCCL specifies it (nccl.h):
- a communicator is an MPI communicator whose ranks are in NCCL rank order.
  `comm_init_rank` is collective over its members, who must pass the same unique id, the
  same nranks and distinct ranks 0..nranks-1 (checked: a mistake there hangs real NCCL);
  `comm_split` is collective over the parent (NCCL_SPLIT_NOCOLOR: no communicator);
- all-reduce: every rank gets the elementwise reduction of every rank's `count` elements;
  all-gather: rank r's `sendcount` elements land at recv + r * sendcount; reduce-scatter:
  rank r gets block r (`recvcount` elements) of the reduction of `nranks * recvcount`
  elements; broadcast: `root`'s elements on every rank; send/recv: matched per peer in call
  order, with the same count and datatype (checked);
- every member of a collective must pass the same kind of call, count, datatype, operator
  and root (checked: each message carries a header);
- the operators: sum and product in the datatype, max/min as NCCL computes them: integers
  compare, floats use fmaxf/fminf, which return the other operand for a NaN (XLA's maximum
  propagates it: that is why plan.py never sends float max/min to NCCL). NCCL's reduction
  order is its own (rings, trees); the model folds in rank order;
- group semantics: calls between group_start and group_end are deferred and run together at
  group_end (buffers are read then), so grouped sends and receives progress together.
Streams are accepted and ignored: the emulator's memory operations are synchronous.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ....util.record import dataclass
from .api import NUMPY_NAMES as _NAMES
from .api import UNIQUE_ID_BYTES, DataType, NcclError, RedOp

_HEADER = 6  # int64 words: call, count, dtype, op or root, nranks, 0
_CALLS = {"all_reduce": 1, "all_gather": 2, "reduce_scatter": 3, "broadcast": 4, "send": 5}


def numpy_dtype(dtype: DataType) -> np.dtype:
    name = _NAMES[DataType(dtype)]
    if hasattr(np, name):
        return np.dtype(name)
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


def reduce_like_nccl(values: list[np.ndarray], op: RedOp) -> np.ndarray:
    """The reduction of `values` (one per rank, rank order) as NCCL's operator computes it."""
    floating = values[0].dtype.kind == "f" or values[0].dtype.name.startswith(("bfloat", "float"))
    combine: dict[RedOp, Callable] = {
        RedOp.SUM: np.add, RedOp.PROD: np.multiply,
        RedOp.MAX: np.fmax if floating else np.maximum,
        RedOp.MIN: np.fmin if floating else np.minimum,
    }
    if op not in combine:
        raise NcclError(f"emulated NCCL: operator {RedOp(op).name} is not modelled")
    acc = np.array(values[0], copy=True)
    with np.errstate(all="ignore"):
        for v in values[1:]:
            acc = combine[op](acc, v).astype(acc.dtype, copy=False)
    return acc


@dataclass
class EmulatedComm:
    """A communicator of the model: `mpi` orders its ranks as NCCL ranks."""

    mpi: Any  # an mpi4py communicator

    @property
    def rank(self) -> int:
        return self.mpi.Get_rank()

    @property
    def size(self) -> int:
        return self.mpi.Get_size()

    def __str__(self) -> str:
        return f"rank {self.rank} of {self.size}"


@dataclass
class _Op:
    """One deferred call: `post()` starts its MPI requests, `finish()` writes its results."""

    what: str
    post: Callable[[], list]
    finish: Callable[[], None]


class EmulatedNccl:
    """NcclApi over MPI. `transport` is the job's MpiCommunicator (its `wait_for` counts,
    times and bounds every wait by --collective-timeout); `memory` the emulator's memory."""

    name = "emulated nccl"

    def __init__(self, transport, memory, can_split: bool = True):
        self.transport = transport
        self.MPI = transport.MPI
        self.memory = memory
        self.can_split = can_split
        self._depth = 0
        self._pending: list[_Op] = []

    # ---- memory ------------------------------------------------------------------------------
    def _bytes(self, ptr: int, nbytes: int) -> np.ndarray:
        """The emulator's bytes [ptr, ptr + nbytes) as a writable view."""
        for index, base in self.memory.base.items():
            array = self.memory.arrays[index]
            if base <= ptr and ptr + nbytes <= base + array.size:
                return array[ptr - base:ptr - base + nbytes]
        raise NcclError(f"emulated NCCL: {nbytes} bytes at {ptr:#x} are outside device memory "
                        "(an illegal address on a GPU)")

    def _header(self, call: str, count: int, dtype: DataType, arg: int, comm) -> np.ndarray:
        return np.array([_CALLS[call], count, int(dtype), arg, comm.size, 0], np.int64)

    def _message(self, header: np.ndarray, ptr: int, nbytes: int) -> np.ndarray:
        return np.concatenate([header.view(np.uint8), self._bytes(ptr, nbytes)])

    @staticmethod
    def _check(what: str, mine: np.ndarray, got: np.ndarray, comm) -> None:
        if not np.array_equal(mine, got):
            raise NcclError(f"emulated NCCL: {what} on {comm}: the ranks' calls differ (call, "
                            f"count, datatype, op/root, nranks: {mine.tolist()} here, "
                            f"{got.tolist()} from a peer); real NCCL would hang or corrupt")

    # ---- communicators -----------------------------------------------------------------------
    def get_unique_id(self) -> bytes:
        return os.urandom(UNIQUE_ID_BYTES)

    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int, bootstrap) -> EmulatedComm:
        peers = bootstrap.allgather((bytes(unique_id), nranks, rank))
        if len({p[0] for p in peers}) != 1 or len(unique_id) != UNIQUE_ID_BYTES:
            raise NcclError("emulated ncclCommInitRank: the members passed different unique ids")
        if {p[1] for p in peers} != {len(peers)} or sorted(p[2] for p in peers) != list(
                range(len(peers))):
            raise NcclError(f"emulated ncclCommInitRank: nranks/rank {[p[1:] for p in peers]} "
                            f"do not number {len(peers)} members 0..{len(peers) - 1}")
        return EmulatedComm(bootstrap.Split(0, rank))

    def comm_split(self, comm: EmulatedComm, color: int, key: int) -> EmulatedComm | None:
        new = comm.mpi.Split(color if color >= 0 else self.MPI.UNDEFINED, key)
        return None if new == self.MPI.COMM_NULL else EmulatedComm(new)

    def comm_destroy(self, comm: EmulatedComm) -> None:
        comm.mpi.Free()

    def comm_abort(self, comm: EmulatedComm) -> None:
        pass  # the job is being ended (MPI_Abort): nothing to release

    def comm_get_async_error(self, comm: EmulatedComm) -> int:
        return 0

    def error_string(self, result: int) -> str:
        return f"emulated NCCL result {result}"

    # ---- groups ------------------------------------------------------------------------------
    def group_start(self) -> None:
        self._depth += 1

    def group_end(self) -> None:
        if self._depth == 0:
            raise NcclError("emulated ncclGroupEnd without ncclGroupStart")
        self._depth -= 1
        if self._depth == 0:
            ops, self._pending = self._pending, []
            self._run(ops)

    def _submit(self, op: _Op) -> None:
        if self._depth:
            self._pending.append(op)
        else:
            self._run([op])

    def _run(self, ops: list[_Op]) -> None:
        if not ops:
            return
        what = ops[0].what if len(ops) == 1 else f"a group of {len(ops)} NCCL calls"
        self.transport.wait_for(what, lambda: [r for op in ops for r in op.post()])
        for op in ops:
            op.finish()

    # ---- collectives -------------------------------------------------------------------------
    def _gathered(self, call: str, send: int, nbytes: int, header: np.ndarray, comm,
                  use: Callable[[list[np.ndarray]], None]) -> _Op:
        """An op that all-gathers every rank's header + `nbytes` at `send`, then checks the
        headers and hands `use` the payloads in rank order."""
        box: dict = {}

        def post() -> list:
            box["mine"] = self._message(header, send, nbytes)
            box["all"] = np.empty(comm.size * box["mine"].size, np.uint8)
            return [comm.mpi.Iallgather([box["mine"], self.MPI.BYTE],
                                        [box["all"], self.MPI.BYTE])]

        def finish() -> None:
            parts = np.split(box["all"], comm.size)
            for part in parts:
                self._check(f"nccl {call}", header, part[:8 * _HEADER].view(np.int64), comm)
            use([part[8 * _HEADER:] for part in parts])

        return _Op(f"nccl {call} ({comm})", post, finish)

    def all_reduce(self, send, recv, count, dtype, op, comm, stream) -> None:
        dt = numpy_dtype(dtype)
        nbytes = count * dt.itemsize
        out = self._bytes(recv, nbytes)

        def use(parts):
            out[:] = reduce_like_nccl([p.view(dt) for p in parts], op).view(np.uint8)

        header = self._header("all_reduce", count, dtype, int(op), comm)
        self._submit(self._gathered("all_reduce", send, nbytes, header, comm, use))

    def all_gather(self, send, recv, sendcount, dtype, comm, stream) -> None:
        nbytes = sendcount * numpy_dtype(dtype).itemsize
        out = self._bytes(recv, nbytes * comm.size)

        def use(parts):
            out[:] = np.concatenate(parts) if parts else out

        header = self._header("all_gather", sendcount, dtype, 0, comm)
        self._submit(self._gathered("all_gather", send, nbytes, header, comm, use))

    def reduce_scatter(self, send, recv, recvcount, dtype, op, comm, stream) -> None:
        dt = numpy_dtype(dtype)
        block = recvcount * dt.itemsize
        out = self._bytes(recv, block)
        rank = comm.rank

        def use(parts):
            reduced = reduce_like_nccl([p.view(dt) for p in parts], op).view(np.uint8)
            out[:] = reduced[rank * block:(rank + 1) * block]

        header = self._header("reduce_scatter", recvcount, dtype, int(op), comm)
        self._submit(self._gathered("reduce_scatter", send, block * comm.size, header, comm,
                                    use))

    def broadcast(self, send, recv, count, dtype, root, comm, stream) -> None:
        nbytes = count * numpy_dtype(dtype).itemsize
        out = self._bytes(recv, nbytes)
        header = self._header("broadcast", count, dtype, root, comm)
        box: dict = {}

        def post() -> list:
            box["buf"] = (self._message(header, send, nbytes) if comm.rank == root
                          else np.empty(8 * _HEADER + nbytes, np.uint8))
            return [comm.mpi.Ibcast([box["buf"], self.MPI.BYTE], root)]

        def finish() -> None:
            self._check("nccl broadcast", header, box["buf"][:8 * _HEADER].view(np.int64), comm)
            out[:] = box["buf"][8 * _HEADER:]

        self._submit(_Op(f"nccl broadcast ({comm})", post, finish))

    # ---- point to point ----------------------------------------------------------------------
    def send(self, send, count, dtype, peer, comm, stream) -> None:
        nbytes = count * numpy_dtype(dtype).itemsize
        header = self._header("send", count, dtype, 0, comm)
        box: dict = {}

        def post() -> list:
            box["buf"] = self._message(header, send, nbytes)
            return [comm.mpi.Isend([box["buf"], self.MPI.BYTE], peer, 0)]

        self._submit(_Op(f"nccl send to {peer} ({comm})", post, lambda: None))

    def recv(self, recv, count, dtype, peer, comm, stream) -> None:
        nbytes = count * numpy_dtype(dtype).itemsize
        out = self._bytes(recv, nbytes)
        header = self._header("send", count, dtype, 0, comm)
        buf = np.empty(8 * _HEADER + nbytes, np.uint8)

        def finish() -> None:
            self._check(f"nccl recv from {peer}", header, buf[:8 * _HEADER].view(np.int64), comm)
            out[:] = buf[8 * _HEADER:]

        self._submit(_Op(f"nccl recv from {peer} ({comm})",
                         lambda: [comm.mpi.Irecv([buf, self.MPI.BYTE], peer, 0)], finish))
