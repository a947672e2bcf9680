"""Communicators: how the devices of one collective exchange their values.

`Communicator` is the transport-neutral interface the collective executor calls; devices are
global device ids. `exchange` (every member gets every member's value, in group order) is the
one primitive a transport must provide; `all_reduce`, `all_gather`, `all_to_all`, `permute`
and `broadcast` have defaults built on it, which a transport with native operations
(MPI_Allreduce with MPI_SUM, MPI_Alltoallv, MPI_Sendrecv, ...) overrides. Members of one
collective pass values of the same shapes and dtypes (the SPMD contract).

`InProcessCommunicator` joins threads of one process (one per device) at a rendezvous per
collective. It never hangs: a failing device aborts every waiter, a device that finishes
while others wait for it, or all live devices waiting on collectives that cannot complete,
is an error naming the collectives, and so is a wait longer than `timeout` seconds.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import field

import numpy as np

from hloc.errors import HlocError

from ..util.record import dataclass
from . import semantics
from .reducers import Reducer


class CollectiveError(HlocError):
    """A collective could not complete: a device failed, diverged or timed out."""


class Communicator(ABC):
    """Exchanges values among a group of devices, one collective at a time."""

    @abstractmethod
    def exchange(self, key: str, group: Sequence[int], me: int, value) -> list:
        """Every member's `value`, in `group` order. All members call with the same key."""

    def all_reduce(self, key: str, group: Sequence[int], me: int, values: Sequence[np.ndarray],
                   reducer: Reducer, out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """Each of `values` reduced over the group in group order; written into `out` (C-
        contiguous arrays like `values`, e.g. a thunk's result buffers) when given."""
        got = self.exchange(key, group, me, tuple(values))
        results = [reducer.fold([g[i] for g in got]) for i in range(len(values))]
        return _into(results, out)

    def all_gather(self, key: str, group: Sequence[int], me: int, values: Sequence[np.ndarray],
                   out: Sequence[np.ndarray] | None = None) -> list[list[np.ndarray]]:
        """For each of `values`, the list of every member's array, in group order. With `out`
        (per value a C-contiguous array of len(group) x its size) the arrays are views of it."""
        got = self.exchange(key, group, me, tuple(values))
        gathered = [np.stack([g[i] for g in got]) for i in range(len(values))]
        return [list(a) for a in _into(gathered, out)]

    def all_to_all(self, key: str, group: Sequence[int], me: int,
                   send: Sequence[np.ndarray]) -> list[np.ndarray]:
        """`send[j]` goes to member j; returns what each member sent to `me`, in group order."""
        got = self.exchange(key, group, me, tuple(send))
        position = list(group).index(me)
        return [g[position] for g in got]

    def permute(self, key: str, domain: Sequence[int], me: int, value: np.ndarray,
                pairs: Sequence[tuple[int, int]]) -> np.ndarray:
        """collective-permute: `pairs` are (source, target) indices into `domain`; returns
        what was sent to `me`, zeros where no source targets it. Every domain member calls."""
        values = self.exchange(key, domain, me, value)
        return semantics.collective_permute(values, pairs, list(domain).index(me), value)

    def broadcast(self, key: str, group: Sequence[int], me: int,
                  values: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The group's first member's `values`, on every member."""
        got = self.exchange(key, group, me, tuple(values))
        return [np.array(v, copy=True) for v in got[0]]


def _into(results: list[np.ndarray], out: Sequence[np.ndarray] | None) -> list[np.ndarray]:
    """`results`, copied into the caller's `out` buffers when given (same sizes)."""
    if out is None:
        return results
    for r, o in zip(results, out, strict=True):
        o.reshape(r.shape)[...] = r
    return [o.reshape(r.shape) for r, o in zip(results, out, strict=True)]


@dataclass
class _Slot:
    group: tuple[int, ...]
    values: dict[int, object] = field(default_factory=dict)
    readers: int = 0

    def complete(self) -> bool:
        return len(self.values) == len(self.group)


class InProcessCommunicator(Communicator):
    """A rendezvous for device threads of one process (the reference interpreter's SPMD run)."""

    def __init__(self, devices: Sequence[int], timeout: float = 300.0):
        self.devices = tuple(devices)
        self.timeout = timeout
        self._cond = threading.Condition()
        self._slots: dict[tuple[str, tuple[int, ...]], _Slot] = {}
        self._waiting: dict[int, str] = {}
        self._finished: set[int] = set()
        self._abort: str | None = None

    def exchange(self, key: str, group: Sequence[int], me: int, value) -> list:
        group = tuple(group)
        with self._cond:
            slot = self._slots.setdefault((key, group), _Slot(group))
            slot.values[me] = value
            self._cond.notify_all()
            self._waiting[me] = key
            try:
                self._wait_for(slot, key, me)
            finally:
                del self._waiting[me]
            slot.readers += 1
            if slot.readers == len(group):
                del self._slots[(key, group)]
            return [slot.values[d] for d in group]

    def _wait_for(self, slot: _Slot, key: str, me: int) -> None:
        deadline = time.monotonic() + self.timeout
        while not slot.complete():
            if self._abort is not None:
                raise CollectiveError(f"device {me} at {key}: {self._abort}")
            problem = self._stuck(slot, key)
            if problem is None and time.monotonic() > deadline:
                problem = f"timed out after {self.timeout:g} s; {self._who_waits()}"
            if problem is not None:
                self._abort = problem
                self._cond.notify_all()
                raise CollectiveError(problem)
            self._cond.wait(0.05)

    def _stuck(self, slot: _Slot, key: str) -> str | None:
        gone = [d for d in slot.group if d in self._finished and d not in slot.values]
        if gone:
            return (f"collective {key}: device {gone[0]} finished without taking part "
                    f"(devices diverged); {self._who_waits()}")
        live = [d for d in self.devices if d not in self._finished]
        if live and all(d in self._waiting for d in live) and not any(
                s.complete() for s in self._slots.values()):
            return f"deadlock: every device waits for a collective that cannot complete; " \
                   f"{self._who_waits()}"
        return None

    def _who_waits(self) -> str:
        return ", ".join(f"device {d} waits at {k}" for d, k in sorted(self._waiting.items()))

    def finish(self, me: int) -> None:
        """Device `me` has run to completion (its peers must not wait for it any more)."""
        with self._cond:
            self._finished.add(me)
            self._cond.notify_all()

    def abort(self, me: int, error: BaseException) -> None:
        """Device `me` failed: every device waiting in a collective raises with its error."""
        with self._cond:
            if self._abort is None:
                self._abort = f"device {me} failed: {error}"
            self._finished.add(me)
            self._cond.notify_all()
