"""Hosting temporaries in entry-output allocations before those outputs are written.

An output's allocation is free from the start of the program until the output (or the
operand it absorbed) is first defined; XLA packs temporaries into it, and so does hloc. Two
ways to choose which temporaries go there (buffer assignment keeps whichever gives the
smaller temp heap):
- "greedy": largest temporaries first, each into the smallest output it fits in;
- "peaks": repeatedly take the tick where the most temp bytes are live and move the largest
  temporary live there into an output, so the heap's lower bound drops where it binds; the
  remaining temporaries then go the greedy way.
"""

from __future__ import annotations

from ..util.record import dataclass
from .heap import HeapItem, IntervalIndex, Placer

# Bounds the work per temporary when a module has many outputs.
_MAX_TRIES = 8
# Bounds the peak-driven rounds (each costs a pass over the timeline).
_MAX_ROUNDS = 256


@dataclass
class Host:
    """An output allocation, free for temporaries that end before tick `start`."""

    size: int
    start: int
    index: int  # allocation index
    placer: Placer


def make_hosts(outputs: list[tuple[int, int, int, int]]) -> list[Host]:
    """Hosts from (allocation index, size, first busy tick, last busy tick), smallest first."""
    hosts = []
    for index, size, start, end in outputs:
        placer = Placer()
        placer.place(HeapItem(-1, start, end, size))  # the output itself, from `start` on
        hosts.append(Host(size, start, index, placer))
    return sorted(hosts, key=lambda h: (h.size, h.index))


def _try_host(item: HeapItem, hosts: list[Host]) -> tuple[int, int] | None:
    """Reserve room for `item` in the smallest output it fits in: (allocation, offset)."""
    tries = 0
    for host in hosts:
        if host.size < item.size or host.start <= item.end:
            continue
        offset = host.placer.place(item, capacity=host.size)
        if offset is not None:
            return host.index, offset
        tries += 1
        if tries >= _MAX_TRIES:
            return None
    return None


def host_greedy(items: dict[int, HeapItem], hosts: list[Host],
                placed: dict[int, tuple[int, int]] | None = None) -> dict[int, tuple[int, int]]:
    """Largest temporaries first (then earliest): {item key: (allocation index, offset)}."""
    placed = {} if placed is None else placed
    for item in sorted(items.values(), key=lambda it: (-it.size, it.start, it.key)):
        if item.size == 0 or item.key in placed:
            continue
        where = _try_host(item, hosts)
        if where is not None:
            placed[item.key] = where
    return placed


def host_peaks(items: dict[int, HeapItem], hosts: list[Host]) -> dict[int, tuple[int, int]]:
    """Lower the peak of live temp bytes first, then host the rest greedily."""
    live_items = [it for it in items.values() if it.size]
    if not live_items or not hosts:
        return {}
    live = _LiveBytes(max(it.end for it in live_items) + 2)
    for it in live_items:
        live.add(it.start, it.end, it.size)
    placed: dict[int, tuple[int, int]] = {}
    index = IntervalIndex(live_items)
    for _ in range(_MAX_ROUNDS):
        tick = live.peak()
        here = sorted((it for it in index.overlapping(tick, tick) if it.key not in placed),
                      key=lambda it: (-it.size, it.start, it.key))
        moved = next(((it, w) for it in here if (w := _try_host(it, hosts)) is not None), None)
        if moved is None:  # nothing live at the peak fits an output: the bound stays
            break
        item, where = moved
        placed[item.key] = where
        live.add(item.start, item.end, -item.size)
    return host_greedy(items, hosts, placed)


class _LiveBytes:
    """Bytes live at each tick, with range updates and the first tick of the peak: a Python
    list for a small schedule (no NumPy for a small module's compile), NumPy's for a long one."""

    SMALL = 4096  # ticks

    def __init__(self, ticks: int) -> None:
        if ticks <= self.SMALL:
            self._live: list[int] | None = [0] * ticks
            self._array = None
        else:
            import numpy as np

            self._live = None
            self._array = np.zeros(ticks, dtype=np.int64)

    def add(self, start: int, end: int, delta: int) -> None:
        """`delta` more bytes live at ticks start..end (inclusive)."""
        if self._live is not None:
            self._live[start:end + 1] = [v + delta for v in self._live[start:end + 1]]
        else:
            self._array[start:end + 1] += delta

    def peak(self) -> int:
        """The first tick with the most bytes live."""
        if self._live is not None:
            return max(range(len(self._live)), key=self._live.__getitem__)
        import numpy as np

        return int(np.argmax(self._array))
