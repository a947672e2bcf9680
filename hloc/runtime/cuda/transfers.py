"""Host ↔ device transfers of the CUDA runtime: arrays into and out of device byte layout,
and the page-locked staging that lets `--device cuda` copy at the link's speed.

`write_array` / `read_array` move one array between a numpy value and the bytes a kernel
reads (the shape's memory order and dtype) in one pass: `np.copyto` converts the dtype and
permutes the axes while it writes, so no intermediate host copy is made (an array already in
the right dtype and row-major order is one memcpy). The emulator writes straight into its
arena; the GPU writes into pinned staging.

`PinnedStaging` (one per CudaExecutable) holds:
- an upload buffer and a download buffer of page-locked host memory (cuMemHostAlloc),
  allocated once, with one 256-byte-aligned slot per parameter leaf / result leaf. DMA from
  or to page-locked memory runs at the link's speed and is truly asynchronous; pageable
  memory makes the driver stage it again through its own pinned buffers, chunk by chunk.
- a copy stream (cuStreamCreate) for every upload and download, and events that order it
  against the compute streams: the compute streams wait for `uploaded` before the first
  kernel; the copy stream waits for a `computed` event recorded on every compute stream
  before the first download.

Why copy into staging rather than pin the caller's arrays (cuMemHostRegister): registering
pins and maps every page on each call (a system call and page-table work costing as much as
copying the array at memory bandwidth, more for small arrays), the array would have to stay
pinned while the DMA runs, and it must already be in device layout and dtype, which the
copy handles for free. The copy into staging overlaps the previous leaf's DMA, since the
copies are queued asynchronously one leaf at a time.

Outputs are copied out of the download buffer into fresh arrays (`read_array`): the caller
owns them, and the next run may reuse the buffer at once (no double-buffering rules for the
caller to follow). That copy runs at host-memory bandwidth, as the driver's own staging of a
pageable destination would.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ...buffers.assignment import Slice
from ...ir import Shape
from ..layouts import memory_order

ALIGN = 256


def write_array(dst: np.ndarray, value, shape: Shape) -> None:
    """Store `value` in `dst` (uint8, shape.byte size) as the device bytes of `shape`."""
    order = memory_order(shape)
    phys = dst.view(shape.np_dtype).reshape([shape.dims[d] for d in order])
    arr = np.asarray(value).reshape(shape.dims)
    np.copyto(phys, np.transpose(arr, order), casting="unsafe")


def read_array(src: np.ndarray, shape: Shape) -> np.ndarray:
    """A new C-ordered array of `shape`'s logical dims from its device bytes in `src`."""
    order = memory_order(shape)
    phys = src.view(shape.np_dtype).reshape([shape.dims[d] for d in order])
    return np.array(np.transpose(phys, np.argsort(order).astype(int)), order="C")


def slots(slices) -> tuple[dict[Slice, int], int]:
    """({slice: offset}, total bytes): one aligned slot per distinct slice."""
    offsets: dict[Slice, int] = {}
    total = 0
    for s in slices:
        if s not in offsets:
            offsets[s] = total
            total += -(-max(1, s.size) // ALIGN) * ALIGN
    return offsets, total


class PinnedBuffer:
    """`size` bytes of page-locked host memory: its address and a uint8 view of it."""

    def __init__(self, cu, size: int, what: str):
        from .driver import check

        self.cu, self.size = cu, size
        self.address = 0
        self.array = np.empty(0, np.uint8)
        if size:
            # Flags 0: plain page-locked memory for this context (not mapped, not
            # write-combined: the download buffer is read by the CPU).
            self.address = int(check(cu, cu.cuMemHostAlloc(size, 0),
                                     f"pinning {size} bytes of host memory for {what}"))
            raw = (ctypes.c_uint8 * size).from_address(self.address)
            # memoryview: the same writable view, in a form numpy's frombuffer stub accepts.
            self.array = np.frombuffer(memoryview(raw), np.uint8)

    def view(self, offset: int, size: int) -> np.ndarray:
        return self.array[offset:offset + size]

    def free(self) -> None:
        if self.address:
            self.array = np.empty(0, np.uint8)
            self.cu.cuMemFreeHost(self.address)
            self.address = 0


class PinnedStaging:
    """Pinned upload/download buffers, the copy stream and its ordering events."""

    def __init__(self, cu, upload_slices, download_slices):
        from .driver import check

        self.cu = cu
        self.up_slots, up_size = slots(upload_slices)
        self.down_slots, down_size = slots(download_slices)
        self.up = PinnedBuffer(cu, up_size, "uploads")
        self.down = PinnedBuffer(cu, down_size, "downloads")
        self.stream = check(cu, cu.cuStreamCreate(0), "cuStreamCreate (copy stream)")
        # Ordering only: CU_EVENT_DISABLE_TIMING makes record and wait cheaper.
        flags = int(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        self.uploaded = check(cu, cu.cuEventCreate(flags), "cuEventCreate")
        self.computed: list = []
        self._event_flags = flags

    def computed_events(self, count: int) -> list:
        """One `computed` event per compute stream (created on first use)."""
        from .driver import check

        while len(self.computed) < count:
            self.computed.append(check(self.cu, self.cu.cuEventCreate(self._event_flags),
                                       "cuEventCreate"))
        return self.computed[:count]

    def free(self) -> None:
        self.up.free()
        self.down.free()
