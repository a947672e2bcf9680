"""Immutable shapes and layouts (XLA's ShapeProto / LayoutProto as values)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import field
from typing import TYPE_CHECKING

from ..util.record import dataclass
from . import dtypes
from .dtypes import PrimitiveType

if TYPE_CHECKING:
    import numpy as np

ShapeIndex = tuple[int, ...]


@dataclass(frozen=True)
class Tile:
    """One tiling level of a layout; -1 in dims is XLA's 'combine' marker printed as '*'."""

    dims: tuple[int, ...]

    def to_text(self) -> str:
        return "(" + ",".join("*" if d == -9223372036854775808 else str(d) for d in self.dims) + ")"


@dataclass(frozen=True)
class Layout:
    """A dense layout: minor_to_major order plus optional tiling and element size."""

    minor_to_major: tuple[int, ...]
    tiles: tuple[Tile, ...] = ()
    element_size_in_bits: int = 0
    memory_space: int = 0

    @staticmethod
    def row_major(rank: int) -> Layout:
        return Layout(tuple(range(rank - 1, -1, -1)))

    @property
    def is_row_major(self) -> bool:
        return self.minor_to_major == tuple(range(len(self.minor_to_major) - 1, -1, -1))

    def to_text(self) -> str:
        text = ",".join(str(d) for d in self.minor_to_major)
        extras = "".join(t.to_text() for t in self.tiles)
        suffix = ""
        if extras:
            suffix += "T" + extras
        if self.element_size_in_bits:
            suffix += f"E({self.element_size_in_bits})"
        if self.memory_space:
            suffix += f"S({self.memory_space})"
        return "{" + text + (":" + suffix if suffix else "") + "}"


@dataclass(frozen=True)
class Shape:
    """An array shape (element type, dims, layout) or a tuple of shapes."""

    element_type: PrimitiveType
    dims: tuple[int, ...] = ()
    layout: Layout | None = None
    tuple_shapes: tuple[Shape, ...] = ()
    dynamic_dims: tuple[bool, ...] = field(default=())

    # ---- construction -------------------------------------------------------------------
    @staticmethod
    def array(element_type: PrimitiveType | str, dims=(), layout: Layout | None | str = "default",
              dynamic_dims=()) -> Shape:
        """An array shape; layout "default" means row-major, None means no layout."""
        et = dtypes.from_name(element_type) if isinstance(element_type, str) else PrimitiveType(element_type)
        dims = tuple(int(d) for d in dims)
        if layout == "default":
            layout = Layout.row_major(len(dims)) if et not in _NO_LAYOUT else None
        dyn = tuple(bool(b) for b in dynamic_dims)
        if dyn and not any(dyn):
            dyn = ()
        return Shape(et, dims, layout, (), dyn)

    @staticmethod
    def tuple_of(shapes) -> Shape:
        return Shape(PrimitiveType.TUPLE, (), None, tuple(shapes))

    @staticmethod
    def scalar(element_type: PrimitiveType | str) -> Shape:
        return Shape.array(element_type, ())

    @staticmethod
    def token() -> Shape:
        return Shape(PrimitiveType.TOKEN)

    # ---- queries ------------------------------------------------------------------------
    @property
    def is_tuple(self) -> bool:
        return self.element_type == PrimitiveType.TUPLE

    @property
    def is_token(self) -> bool:
        return self.element_type == PrimitiveType.TOKEN

    @property
    def is_array(self) -> bool:
        return self.element_type not in _NO_LAYOUT

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def dtype(self) -> dtypes.DTypeInfo:
        return dtypes.info(self.element_type)

    @property
    def np_dtype(self) -> np.dtype:
        return dtypes.to_numpy(self.element_type)

    @property
    def num_elements(self) -> int:
        return math.prod(self.dims)

    @property
    def byte_size(self) -> int:
        """Dense size in bytes of an array (0 for tuples and tokens: they own no data here)."""
        if not self.is_array:
            return 0
        return self.num_elements * self.dtype.byte_size

    def major_to_minor(self) -> list[int]:
        """Logical dimensions from the slowest-varying to the contiguous one (row-major
        where the layout is missing or of another rank)."""
        layout = self.layout
        if layout is None or len(layout.minor_to_major) != self.rank:
            return list(range(self.rank))
        return list(reversed(layout.minor_to_major))

    def with_layout(self, layout: Layout | None) -> Shape:
        return Shape(self.element_type, self.dims, layout, self.tuple_shapes, self.dynamic_dims)

    def without_layout(self) -> Shape:
        """The same shape with every layout dropped (layout-insensitive comparisons)."""
        if self.is_tuple:
            return Shape.tuple_of(s.without_layout() for s in self.tuple_shapes)
        return Shape(self.element_type, self.dims, None, (), self.dynamic_dims)

    def with_dims(self, dims) -> Shape:
        return Shape.array(self.element_type, dims)

    def with_type(self, element_type: PrimitiveType) -> Shape:
        layout = self.layout if element_type not in _NO_LAYOUT else None
        return Shape(PrimitiveType(element_type), self.dims, layout, (), self.dynamic_dims)

    def compatible(self, other: Shape) -> bool:
        """Equal ignoring layouts."""
        return self.without_layout() == other.without_layout()

    def subshape(self, index: ShapeIndex) -> Shape:
        s = self
        for i in index:
            s = s.tuple_shapes[i]
        return s

    def leaves(self, prefix: ShapeIndex = ()) -> Iterator[tuple[ShapeIndex, Shape]]:
        """Depth-first (index, array shape) for every non-tuple leaf."""
        if not self.is_tuple:
            yield prefix, self
            return
        for i, s in enumerate(self.tuple_shapes):
            yield from s.leaves(prefix + (i,))

    def positions(self, prefix: ShapeIndex = ()) -> Iterator[tuple[ShapeIndex, Shape]]:
        """Every (index, subshape), tuples included, pre-order."""
        yield prefix, self
        for i, s in enumerate(self.tuple_shapes):
            yield from s.positions(prefix + (i,))

    # ---- text ---------------------------------------------------------------------------
    def to_text(self, print_layout: bool = True) -> str:
        if self.is_tuple:
            return "(" + ", ".join(s.to_text(print_layout) for s in self.tuple_shapes) + ")"
        name = self.dtype.name
        if not self.is_array:
            return f"{name}[]"
        dims = []
        for i, d in enumerate(self.dims):
            dyn = self.dynamic_dims[i] if i < len(self.dynamic_dims) else False
            dims.append(f"<={d}" if dyn else str(d))
        text = f"{name}[{','.join(dims)}]"
        if print_layout and self.layout is not None and self.rank > 0:
            text += self.layout.to_text()
        elif print_layout and self.layout is not None and (self.layout.tiles or self.layout.memory_space):
            text += self.layout.to_text()
        return text

    def __str__(self) -> str:
        return self.to_text()


_NO_LAYOUT = frozenset({PrimitiveType.TUPLE, PrimitiveType.TOKEN, PrimitiveType.OPAQUE_TYPE,
                        PrimitiveType.INVALID})


def shape_of_array(arr: np.ndarray) -> Shape:
    """The row-major array shape of a numpy array."""
    return Shape.array(dtypes.from_numpy(arr.dtype), arr.shape)
