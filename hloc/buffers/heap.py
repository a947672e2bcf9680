"""The heap simulator: pack live ranges into one block of memory.

Each item has an inclusive tick range and a size; items whose ranges overlap must not overlap
in memory. Placement is best fit: an item goes into the smallest free gap (among the items
already placed that overlap it in time) it fits in, else on top of them. Offsets are aligned
to ALIGNMENT bytes, or for a block smaller than that to its size rounded up to a power of two
(`alignment`): a scalar then costs 4 bytes, not 64, and every element stays naturally aligned
(element sizes are powers of two that divide it). Two orders are tried — decreasing size and increasing start tick — and
the smaller heap wins.

Finding the placed items that overlap an item in time uses a static interval tree over all
items, so a placement costs O(log n + items overlapping it), not O(all items).
"""

from __future__ import annotations

from ..util.record import dataclass

ALIGNMENT = 64
_BUCKET = 32


@dataclass(frozen=True)
class HeapItem:
    """One block to place: `key` identifies it to the caller."""

    key: int
    start: int
    end: int
    size: int


@dataclass(frozen=True)
class HeapResult:
    """Offsets by item key, the heap size and which placement order produced it."""

    offsets: dict[int, int]
    size: int
    strategy: str


def align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def alignment(size: int) -> int:
    """The offset alignment of a block of `size` bytes: ALIGNMENT, or less for a small block.

    Modules with many loop-carried scalars keep dozens of them live at once; at 64 bytes each
    they dominated the temp heap of such modules."""
    if size >= ALIGNMENT:
        return ALIGNMENT
    return 1 << max(0, size - 1).bit_length()


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class IntervalIndex:
    """A static centered interval tree: which items overlap a tick range, in O(log n + k)."""

    def __init__(self, items):
        self.root = self._build(list(items))

    def _build(self, items):
        if not items:
            return None
        points = sorted(p for it in items for p in (it.start, it.end))
        c = points[len(points) // 2]
        mid = [it for it in items if it.start <= c <= it.end]  # never empty: c is an endpoint
        return (c, sorted(mid, key=lambda it: it.start), sorted(mid, key=lambda it: -it.end),
                self._build([it for it in items if it.end < c]),
                self._build([it for it in items if it.start > c]))

    def overlapping(self, start: int, end: int) -> list[HeapItem]:
        out: list[HeapItem] = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node is None:
                continue
            c, by_start, by_end, left, right = node
            if end < c:
                out.extend(_prefix(by_start, lambda it: it.start <= end))
                stack.append(left)
            elif start > c:
                out.extend(_prefix(by_end, lambda it: it.end >= start))
                stack.append(right)
            else:
                out.extend(by_start)
                stack.extend((left, right))
        return out


def _prefix(items, keep):
    for it in items:
        if not keep(it):
            return
        yield it


class Placer:
    """Best-fit placement of items into one block, optionally of bounded capacity.

    With an IntervalIndex over every item that will be placed, overlap queries cost only the
    items really overlapping; without one (items not known up front), a bucket index over
    ticks is used."""

    def __init__(self, index: IntervalIndex | None = None):
        self.index = index
        self.buckets: dict[int, list[HeapItem]] = {}
        self.offsets: dict[int, int] = {}  # item key -> offset
        self.size = 0

    def _candidates(self, item: HeapItem):
        if self.index is not None:
            return self.index.overlapping(item.start, item.end)
        found: dict[int, HeapItem] = {}
        for b in range(item.start // _BUCKET, item.end // _BUCKET + 1):
            found.update((it.key, it) for it in self.buckets.get(b, ()))
        return [it for it in found.values() if it.start <= item.end and item.start <= it.end]

    def place(self, item: HeapItem, capacity: int | None = None) -> int | None:
        """The item's offset (now reserved), or None if it would not fit below `capacity`."""
        offsets = self.offsets
        busy = sorted((offsets[it.key], it.size) for it in self._candidates(item)
                      if it.key in offsets and it.size)
        offset = _best_fit(busy, item.size, alignment(item.size))
        if capacity is not None and offset + item.size > capacity:
            return None
        offsets[item.key] = offset
        if self.index is None:
            for b in range(item.start // _BUCKET, item.end // _BUCKET + 1):
                self.buckets.setdefault(b, []).append(item)
        if item.size:
            self.size = max(self.size, offset + item.size)
        return offset


def _best_fit(busy: list[tuple[int, int]], need: int, to: int) -> int:
    """The `to`-aligned start of the smallest free gap holding `need` bytes between busy blocks
    (sorted by offset), or the first aligned free offset above them all."""
    best_offset, best_gap = None, None
    cursor = 0
    for offset, size in busy:
        start = _round_up(cursor, to)
        gap = offset - cursor
        if offset - start >= need and (best_gap is None or gap < best_gap):
            best_offset, best_gap = start, gap
        cursor = max(cursor, offset + size)
    return _round_up(cursor, to) if best_offset is None else best_offset


_ORDERS = {
    "size": lambda it: (-align(it.size), -(it.end - it.start), it.start, it.key),
    "live-range": lambda it: (it.start, -align(it.size), it.key),
}


def simulate(items: list[HeapItem], orders=("size", "live-range")) -> HeapResult:
    """Place every item with each order; keep the smallest heap (the first order on ties)."""
    best: HeapResult | None = None
    index = IntervalIndex(it for it in items if it.size)
    for name in orders:
        placer = Placer(index)
        offsets = {}
        for item in sorted(items, key=_ORDERS[name]):
            offsets[item.key] = placer.place(item) if item.size else 0
        result = HeapResult(offsets, placer.size, name)
        if best is None or result.size < best.size:
            best = result
    return best or HeapResult({}, 0, orders[0])


def lower_bound(items: list[HeapItem]) -> int:
    """The most bytes live at any one tick: no placement can use less."""
    events: dict[int, int] = {}
    for it in items:
        events[it.start] = events.get(it.start, 0) + it.size
        events[it.end + 1] = events.get(it.end + 1, 0) - it.size
    live = peak = 0
    for t in sorted(events):
        live += events[t]
        peak = max(peak, live)
    return peak
