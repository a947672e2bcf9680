"""Physical dimension order of array buffers, for the runtimes' NumPy views."""

from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Shape


def physical_order(shape: Shape) -> tuple[int, ...] | None:
    """Logical dimensions from major to minor, or None for row-major (the identity)."""
    layout = shape.layout
    if layout is None or shape.rank < 2 or layout.is_row_major:
        return None
    if layout.tiles:
        raise UnsupportedError(f"the runtime does not support tiled layouts ({shape})")
    return tuple(reversed(layout.minor_to_major))


def memory_order(shape: Shape) -> list[int]:
    """Logical dimensions from major to minor, the identity included (a transpose order)."""
    order = physical_order(shape)
    return list(range(shape.rank)) if order is None else list(order)
