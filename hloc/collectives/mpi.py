"""An MPI Communicator (mpi4py): the devices of a multi-device module as the ranks of one job.

Ranks and devices: rank i runs the i-th device of the module's device assignment in
replica-major order (`DeviceGrid.devices()`: (0,0), (0,1), ..., (1,0), ...), so
`device_ids[i]` is the global device id rank i runs; the communicator translates the global
device ids of every group into ranks.

Groups: each participant group is a sub-communicator whose ranks are in participant order
(sub-rank = position in the group). `prepare(partitions)` creates them all up front with
MPI_Comm_split over the world, in an order derived from the module alone (the same on every
rank), before the first collective; a group not prepared is created lazily with
MPI_Comm_create_group, collective over its members only. Both are cached by group.

Operations: all-reduce with a recognized reducer kind on a dtype MPI has maps to
MPI_Iallreduce (SUM, PROD, MIN, MAX, LAND/BAND, LOR/BOR; float min/max excepted, since MPI's
MIN/MAX do not propagate NaN as XLA does); all-gather to MPI_Iallgather, all-to-all to
MPI_Ialltoallv, collective-broadcast to MPI_Ibcast, collective-permute to MPI_Isend/Irecv, all
on raw bytes, so every dtype (bf16, f8, ...) travels. Anything else (another reducer,
f16/bf16/f8 sums, complex min) is an ordered reduction: gather to the group's first member,
fold in participant order there, broadcast. With `deterministic=True` every all-reduce is
that ordered reduction, bit-identical to XLA CPU and to the in-process interpreter; the
default native path sums in MPI's order, which may differ in the last bit from 3 ranks on.

Waiting: every operation is nonblocking and waited for by `_wait`, which polls MPI_Testall
a few times in a row, yielding the CPU between those bursts and backing off to short sleeps,
so oversubscribed ranks (more ranks than cores) do not spin, and which raises
CollectiveError once `timeout` seconds pass (the caller then aborts the job).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Sequence

import numpy as np

from hloc.errors import HlocError, InputError

from .communicator import CollectiveError, Communicator
from .reducers import Reducer

INSTALL_HINT = "pip install 'hloc[dist]'"
# MPICH reads these at MPI_Init: yield the CPU inside its own blocking waits (MPI_Init,
# communicator creation, finalize) instead of spinning when ranks outnumber the cores.
MPICH_YIELD_ENV = {"MPIR_CVAR_POLLS_BEFORE_YIELD": "100", "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1",
                   "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1"}
# _wait polls MPI_Testall (a nonblocking collective only advances inside MPI calls): for the
# first _YIELD_S with sched_yield between polls (a transfer of tens of MiB keeps moving, and
# an oversubscribed peer gets the core), then with sleeps doubling up to _MAX_SLEEP, so a
# rank waiting for a slow peer uses little CPU (sleeps up to _LONG_SLEEP after a second).
# Each poll is a burst of _POLLS Testall calls (microseconds each): one progress pass per
# yield left oversubscribed ranks switching cores after every step of a pipelined transfer
# (all-gather of 4 MiB on 4 ranks over 2 cores: 0.84 of blocking MPI_Allgather; 0.97-1.0
# with bursts of 3 to 100, as MPICH's own blocking wait polls 100 times per yield).
_POLLS = 10
_YIELD_S = 20e-3
_MAX_SLEEP = 250e-6
_LONG_SLEEP = 5e-3
# Test-only fault injection, "RANK:exit|raise|hang", acted on at that rank's first collective.
FAULT_ENV = "HLOC_TEST_MPI_FAULT"


class MissingMpiError(HlocError):
    """mpi4py or an MPI launcher is not installed (exit 2, one line saying what to install)."""


def import_mpi():
    """mpi4py's MPI module, initialized for this process (MissingMpiError if absent)."""
    for k, v in MPICH_YIELD_ENV.items():
        os.environ.setdefault(k, v)
    try:
        import mpi4py
    except ImportError:
        raise MissingMpiError(f"multi-process runs need mpi4py and an MPI library: "
                              f"{INSTALL_HINT}") from None
    # One thread drives MPI (the device's executor); no THREAD_MULTIPLE locking needed.
    mpi4py.rc.thread_level = "serialized"
    from mpi4py import MPI

    return MPI


def _flat_bytes(a) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _from_bytes(buf: np.ndarray, like: np.ndarray) -> np.ndarray:
    return buf.view(like.dtype).reshape(like.shape)


def _mpi_type(MPI, dtype: np.dtype):
    """The MPI datatype a native reduction uses for `dtype`, or None (MPI has none)."""
    names = {"float32": "FLOAT", "float64": "DOUBLE", "int8": "INT8_T", "int16": "INT16_T",
             "int32": "INT32_T", "int64": "INT64_T", "uint8": "UINT8_T", "uint16": "UINT16_T",
             "uint32": "UINT32_T", "uint64": "UINT64_T", "bool": "C_BOOL",
             "complex64": "C_FLOAT_COMPLEX", "complex128": "C_DOUBLE_COMPLEX"}
    name = names.get(np.dtype(dtype).name)
    return getattr(MPI, name) if name else None


def _mpi_op(MPI, kind: str | None, dtype: np.dtype):
    """The MPI_Op reducing `kind` on `dtype` exactly as XLA does, or None."""
    dt = np.dtype(dtype)
    if dt == np.bool_:  # pred: add is or, multiply is and (XLA)
        return {"add": MPI.LOR, "or": MPI.LOR, "maximum": MPI.LOR, "multiply": MPI.LAND,
                "and": MPI.LAND, "minimum": MPI.LAND}.get(kind)
    if kind in ("add", "multiply"):
        return MPI.SUM if kind == "add" else MPI.PROD
    if dt.kind in "iu":
        return {"minimum": MPI.MIN, "maximum": MPI.MAX, "and": MPI.BAND,
                "or": MPI.BOR}.get(kind)
    return None


class MpiCommunicator(Communicator):
    """Collectives between the ranks of an MPI job; rank i runs device `device_ids[i]`."""

    def __init__(self, world, device_ids: Sequence[int], *, deterministic: bool = False,
                 timeout: float = 300.0):
        self.MPI = import_mpi()
        self.world = world
        self.device_ids = tuple(device_ids)
        if world.Get_size() != len(self.device_ids):
            raise InputError(f"the MPI job has {world.Get_size()} ranks, the module runs on "
                             f"{len(self.device_ids)} devices (run one rank per device)")
        self.rank = world.Get_rank()
        self.rank_of = {d: r for r, d in enumerate(self.device_ids)}
        self.deterministic = deterministic
        self.timeout = timeout
        self.seconds = 0.0  # time spent in collectives (for --profile)
        self.count = 0
        self._subs: dict[tuple[int, ...], object] = {}
        self._p2p = world.Dup()  # collective-permute's messages, apart from anything else
        self._fault = os.environ.get(FAULT_ENV, "")

    # ---- groups ------------------------------------------------------------------------

    def prepare(self, partitions: Iterable[Sequence[Sequence[int]]]) -> None:
        """Create the sub-communicators of every partition of the devices into groups (each a
        sequence of global-id groups in participant order), collectively over all ranks."""
        me = self.device_ids[self.rank]
        for groups in partitions:
            ordered = sorted(tuple(g) for g in groups)
            mine = [i for i, g in enumerate(ordered) if me in g]
            if not mine:  # this rank takes no part: MPI_UNDEFINED colour, no communicator
                self.world.Split(self.MPI.UNDEFINED, 0)
                continue
            group = ordered[mine[0]]
            sub = self.world.Split(mine[0], group.index(me))
            self._subs.setdefault(group, sub)

    def _sub(self, group: Sequence[int]):
        group = tuple(group)
        sub = self._subs.get(group)
        if sub is None:
            ranks = [self.rank_of[d] for d in group]
            members = self.world.Get_group().Incl(ranks)
            sub = self._subs[group] = self.world.Create_group(members, tag=len(self._subs))
        return sub

    # ---- waiting -----------------------------------------------------------------------

    def _enter(self, key: str) -> float:
        if self._fault:
            self._inject(key)
        self.count += 1
        return time.perf_counter()

    def _inject(self, key: str) -> None:
        rank, _, action = self._fault.partition(":")
        self._fault = ""
        if int(rank) != self.rank:
            return
        if action == "exit":
            os._exit(7)
        if action == "hang":
            time.sleep(3600)
        raise RuntimeError(f"injected fault before collective {key}")

    def _wait(self, requests: list, key: str, start: float) -> None:
        """Wait for `requests` without spinning; CollectiveError after `timeout` seconds."""
        testall, deadline = self.MPI.Request.Testall, start + self.timeout
        yield_until, delay = time.perf_counter() + _YIELD_S, 0.0
        while not any(testall(requests) for _ in range(_POLLS)):
            now = time.perf_counter()
            if now > deadline:
                raise CollectiveError(
                    f"device {self.device_ids[self.rank]}: collective {key} "
                    f"did not complete within {self.timeout:g} s (a peer is stuck, gone or "
                    f"diverged; --collective-timeout S changes the limit)")
            if now < yield_until:
                os.sched_yield()
            else:
                time.sleep(delay)
                cap = _MAX_SLEEP if now - start < 1.0 else _LONG_SLEEP
                delay = min(max(2 * delay, 1e-5), cap)
        self.seconds += time.perf_counter() - start

    def wait_for(self, key: str, post) -> None:
        """Post requests (`post()` returns them) and wait for them as collective `key` of this
        rank: counted, timed and bounded like the operations below (emulated NCCL's
        transport)."""
        start = self._enter(key)
        self._wait(post(), key, start)

    # ---- operations --------------------------------------------------------------------

    def exchange(self, key: str, group: Sequence[int], me: int, value) -> list:
        values = value if isinstance(value, tuple) else (value,)
        gathered = self.all_gather(key, group, me, [np.asarray(v) for v in values])
        per_member = list(zip(*gathered, strict=True))
        return [tuple(m) if isinstance(value, tuple) else m[0] for m in per_member]

    def all_gather(self, key, group, me, values, out=None) -> list[list[np.ndarray]]:
        start, sub, n = self._enter(key), self._sub(group), len(group)
        outs, reqs = [], []
        for i, v in enumerate(values):
            v = np.ascontiguousarray(v)
            # The caller's buffer when given: a fresh one costs page faults on every call.
            recv = _flat_bytes(out[i]) if out is not None else np.empty(n * v.nbytes, np.uint8)
            reqs.append(sub.Iallgather([_flat_bytes(v), self.MPI.BYTE], [recv, self.MPI.BYTE]))
            outs.append((recv, v))
        self._wait(reqs, key, start)
        return [[_from_bytes(part, v) for part in np.split(recv, n)] for recv, v in outs]

    def all_reduce(self, key, group, me, values, reducer: Reducer, out=None) -> list[np.ndarray]:
        start, sub = self._enter(key), self._sub(group)
        results: list = [None] * len(values)
        reqs = []
        for i, v in enumerate(values):
            v = np.ascontiguousarray(v)
            dtype = _mpi_type(self.MPI, v.dtype)
            op = None if self.deterministic or dtype is None else \
                _mpi_op(self.MPI, reducer.kind, v.dtype)
            if op is None:
                continue
            results[i] = out[i].reshape(v.shape) if out is not None else np.empty_like(v)
            reqs.append(sub.Iallreduce([v, dtype], [results[i], dtype], op))
        for i, v in enumerate(values):
            if results[i] is None:  # ordered: gather, fold in participant order, broadcast
                results[i] = self._ordered_reduce(sub, key, start, np.ascontiguousarray(v),
                                                  reducer)
                if out is not None:
                    out[i].reshape(v.shape)[...] = results[i]
                    results[i] = out[i].reshape(v.shape)
        self._wait(reqs, key, start)
        return results

    def _ordered_reduce(self, sub, key, start, v: np.ndarray, reducer: Reducer) -> np.ndarray:
        n, root = sub.Get_size(), sub.Get_rank() == 0
        recv = np.empty(n * v.nbytes, np.uint8) if root else None
        rspec = [recv, self.MPI.BYTE] if root else None
        self._wait([sub.Igather([_flat_bytes(v), self.MPI.BYTE], rspec, 0)], key, start)
        out = reducer.fold([_from_bytes(p, v) for p in np.split(recv, n)]) if root else \
            np.empty_like(v)
        out = np.ascontiguousarray(out, dtype=v.dtype)
        self._wait([sub.Ibcast([_flat_bytes(out), self.MPI.BYTE], 0)], key, start)
        return out

    def all_to_all(self, key, group, me, send) -> list[np.ndarray]:
        start, sub = self._enter(key), self._sub(group)
        like = np.ascontiguousarray(send[sub.Get_rank()])  # what each member sends here
        sizes = [np.asarray(s).nbytes for s in send]
        sbuf = np.concatenate([_flat_bytes(s) for s in send]) if send else np.empty(0, np.uint8)
        rbuf = np.empty(like.nbytes * len(group), np.uint8)
        n = len(group)
        sdispl = np.cumsum([0] + sizes[:-1]).tolist()
        rdispl = [like.nbytes * j for j in range(n)]
        req = sub.Ialltoallv([sbuf, (sizes, sdispl), self.MPI.BYTE],
                             [rbuf, ([like.nbytes] * n, rdispl), self.MPI.BYTE])
        self._wait([req], key, start)
        return [_from_bytes(p, like).copy() for p in np.split(rbuf, len(group))]

    def permute(self, key, domain, me, value, pairs) -> np.ndarray:
        start = self._enter(key)
        domain = list(domain)
        position = domain.index(me)
        value = np.ascontiguousarray(value)
        out = np.zeros_like(value)
        reqs = []
        # Messages between two ranks on one communicator and tag arrive in order, and every
        # rank runs its collectives in program order, so one tag serves every permute.
        for s, t in pairs:
            if s == position and t == position:
                out[...] = value
            elif t == position:
                reqs.append(self._p2p.Irecv([_flat_bytes(out), self.MPI.BYTE],
                                            self.rank_of[domain[s]], 0))
            elif s == position:
                reqs.append(self._p2p.Isend([_flat_bytes(value), self.MPI.BYTE],
                                            self.rank_of[domain[t]], 0))
        self._wait(reqs, key, start)
        return out

    def broadcast(self, key, group, me, values) -> list[np.ndarray]:
        start, sub = self._enter(key), self._sub(group)
        outs = [np.array(v, copy=True, order="C") for v in values]
        reqs = [sub.Ibcast([_flat_bytes(o), self.MPI.BYTE], 0) for o in outs]
        self._wait(reqs, key, start)
        return outs

    # ---- consistency -------------------------------------------------------------------

    def check_same(self, what: str, text: str) -> None:
        """Every rank must pass the same `text` (e.g. a bundle digest): InputError on every
        rank naming the ranks that differ from rank 0, before any collective runs."""
        digest = np.frombuffer(hashlib.sha256(text.encode()).digest(), np.uint8)
        recv = np.empty(self.world.Get_size() * digest.size, np.uint8)
        start = time.perf_counter()
        self._wait([self.world.Iallgather([digest, self.MPI.BYTE], [recv, self.MPI.BYTE])],
                   f"check of {what}", start)
        rows = recv.reshape(-1, digest.size)
        differ = [r for r in range(len(rows)) if not np.array_equal(rows[r], rows[0])]
        if differ:
            raise InputError(f"ranks {differ} have a different {what} than rank 0 "
                             f"(every rank must run the same bundle with the same options)")
