"""The CPU runtime's memory: one 64-byte-aligned arena, plus per-run bindings.

Allocation `i` of the buffer assignment lives at `base[i]` inside the arena; a slice
(allocation, offset, size) is `arena[base[allocation] + offset : ... + size]`. Views of a slice
as an array follow the shape's layout (the logical index order of the view maps to the
physical minor_to_major order in memory), so NumPy code reads and writes exactly the bytes the
kernels do.

Large entry parameters and outputs need not live in the arena: a *rebindable* allocation can
be pointed at other memory for a run (the caller's input array, a fresh output array), which
saves copying them in and out. Everything that refers to memory registers with `Memory`: a
kernel's pointer slot (`pointer`) or an array `Cell` (a view, optionally transformed, that
NumPy steps read at run time as `cell.a`); `bind` re-points the registered sites of one
allocation, and does nothing when the allocation already points there.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...buffers.assignment import Slice
from ...errors import InputError
from ...ir import Shape
from ..layouts import physical_order

ALIGN = 64
SCRATCH = -1  # the allocation index of the runtime's own scratch space (composites)


def round_up(n: int, align: int = ALIGN) -> int:
    return -(-n // align) * align


def aligned_bytes(size: int) -> np.ndarray:
    """A zeroed uint8 array of `size` bytes starting on an ALIGN boundary."""
    raw = np.zeros(size + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + size]


def empty_aligned(size: int) -> np.ndarray:
    raw = np.empty(size + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + size]


class OutputBlocks:
    """Memory for the outputs a run returns as they are (fresh outputs), taken back once the
    caller has let go of every array that views it, and handed out again.

    A big fresh array is new memory to the kernel: each run paid for its page faults as the
    kernel first wrote it, and with transparent huge pages on request (`madvise`, as NumPy
    asks for big arrays) a fault may wait for the kernel to compact memory. An elementwise
    kernel writing 64 MB took 12.5 ms or 30-38 ms from one run to the next (2 Zen 4 cores);
    in a reused block it does not fault at all. A run whose caller still holds the last
    outputs (e.g. keeps every result) gets new blocks, as before. At most KEEP free blocks of
    each size are kept."""

    KEEP = 2

    def __init__(self) -> None:
        self._free: dict[int, list[np.ndarray]] = {}

    def take(self, size: int) -> np.ndarray:
        """`size` bytes (uint8, ALIGN-aligned) that no one else views."""
        free = self._free.get(size)
        block = free.pop() if free else empty_aligned(size)
        return np.asarray(_Lease(self, block))

    def give_back(self, block: np.ndarray) -> None:
        free = self._free.setdefault(block.size, [])
        if len(free) < self.KEEP:
            free.append(block)


class _Lease:
    """A block lent out: the base object of every array that views it. When the last such
    array is gone, so is the lease, and the block goes back to its OutputBlocks."""

    __slots__ = ("__array_interface__", "_blocks", "_block")

    def __init__(self, blocks: OutputBlocks, block: np.ndarray):
        self._blocks, self._block = blocks, block
        self.__array_interface__ = {"data": (block.ctypes.data, False), "shape": block.shape,
                                    "typestr": "|u1", "version": 3}

    def __del__(self) -> None:
        try:
            self._blocks.give_back(self._block)
        except Exception:  # noqa: BLE001 - e.g. at interpreter exit: the block is freed then
            pass


def array_view(raw: np.ndarray, shape: Shape) -> np.ndarray:
    """Bytes `raw` as an array of `shape`, indexed in logical order."""
    if raw.size != shape.byte_size:
        raise InputError(f"{raw.size} bytes cannot hold {shape} ({shape.byte_size} bytes)")
    order = physical_order(shape)
    if order is None:
        return raw.view(shape.np_dtype).reshape(shape.dims)
    phys = raw.view(shape.np_dtype).reshape([shape.dims[d] for d in order])
    return phys.transpose(np.argsort(order))


class Cell:
    """A view of a slice that follows its allocation's binding: read it as `cell.a`."""

    __slots__ = ("a", "offset", "size", "shape", "transform")

    def __init__(self, offset: int, size: int, shape: Shape | None,
                 transform: Callable[[np.ndarray], np.ndarray] | None):
        self.offset, self.size, self.shape, self.transform = offset, size, shape, transform
        self.a: np.ndarray = None  # set by bind()

    def bind(self, memory: np.ndarray) -> None:
        raw = memory[self.offset:self.offset + self.size]
        view = raw if self.shape is None else array_view(raw, self.shape)
        self.a = view if self.transform is None else self.transform(view)


class Memory:
    """The arena and the current binding of every allocation."""

    def __init__(self, allocations, rebindable: frozenset[int] = frozenset(),
                 scratch_bytes: int = 0):
        sizes = {a.index: a.size for a in allocations}
        sizes[SCRATCH] = scratch_bytes
        self.base: dict[int, int] = {}
        offset = 0
        for index, size in sizes.items():
            self.base[index] = offset
            offset += round_up(max(size, 1))
        self.size = offset
        self.arena = aligned_bytes(offset)
        self.sizes = sizes
        self.rebindable = rebindable
        # allocation -> the bytes it is bound to now (its arena region until rebound)
        self.bound = {i: self.home(i) for i in rebindable}
        self._pointers: dict[int, list] = {i: [] for i in rebindable}
        self._cells: dict[int, list[Cell]] = {i: [] for i in rebindable}

    def home(self, allocation: int) -> np.ndarray:
        """The allocation's own bytes in the arena."""
        start = self.base[allocation]
        return self.arena[start:start + self.sizes[allocation]]

    def _memory_of(self, allocation: int) -> tuple[np.ndarray, int]:
        if allocation in self.rebindable:
            return self.bound[allocation], 0
        return self.arena, self.base[allocation]

    def pointer(self, s: Slice, array, index: int) -> None:
        """Set `array[index]` (a ctypes pointer array) to the slice's address, now and after
        every rebinding."""
        memory, start = self._memory_of(s.allocation)
        array[index] = memory.ctypes.data + start + s.offset
        if s.allocation in self.rebindable:
            self._pointers[s.allocation].append((array, index, s.offset))

    def cell(self, s: Slice, shape: Shape | None = None,
             transform: Callable[[np.ndarray], np.ndarray] | None = None) -> Cell:
        """A cell viewing slice `s` as `shape` (raw bytes if None), then `transform`ed."""
        memory, start = self._memory_of(s.allocation)
        cell = Cell(start + s.offset, s.size, shape, transform)
        cell.bind(memory)
        if s.allocation in self.rebindable:
            self._cells[s.allocation].append(cell)
        return cell

    def view(self, s: Slice, shape: Shape) -> np.ndarray:
        """A view of a slice of an allocation that is never rebound (scratch, constants)."""
        if s.allocation in self.rebindable:
            raise ValueError(f"allocation {s.allocation} is rebindable: use a cell")
        start = self.base[s.allocation] + s.offset
        return array_view(self.arena[start:start + s.size], shape)

    def slice_bytes(self, s: Slice) -> np.ndarray:
        """The bytes of slice `s` where its allocation is bound now (a writable view)."""
        memory, start = self._memory_of(s.allocation)
        return memory[start + s.offset:start + s.offset + s.size]

    def bind(self, allocation: int, memory: np.ndarray) -> None:
        """Point a rebindable allocation at `memory` (uint8, at least its size)."""
        current = self.bound[allocation]
        if current.ctypes.data == memory.ctypes.data and current.size == memory.size:
            return
        self.bound[allocation] = memory
        address = memory.ctypes.data
        for array, index, offset in self._pointers[allocation]:
            array[index] = address + offset
        for cell in self._cells[allocation]:
            cell.bind(memory)
