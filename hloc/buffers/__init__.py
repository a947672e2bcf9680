"""Buffer assignment: allocations and slices for every HLO value, and their serialization.

The compile stage that runs it (copy insertion → scheduling → assignment → thunks) is
`hloc.plan`.
"""

from __future__ import annotations

from .assignment import (
    Allocation,
    BufferAssignment,
    MemoryStats,
    ScratchNeed,
    Slice,
    assign_buffers,
)
from .heap import ALIGNMENT, HeapItem, HeapResult, simulate
from .serialize import assignment_to_proto_bytes, assignment_to_text

__all__ = ["ALIGNMENT", "Allocation", "BufferAssignment", "HeapItem", "HeapResult", "MemoryStats",
           "ScratchNeed", "Slice", "assign_buffers", "assignment_to_proto_bytes", "assignment_to_text",
           "simulate"]
