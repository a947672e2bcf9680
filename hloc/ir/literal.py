"""Literals: immutable constant values backed by numpy arrays (tuples hold literals).

A literal made from element bytes (`Literal(shape, data=...)`: the frontend's small
constants, `Literal.scalar` of a Python value, ir/packing.py) keeps those bytes and makes its
array at the first use of `array`: equality, hashing, `splat_bytes`, `values` and printing
(ir/text/literal_text.py) read the bytes, so a compile of a module whose constants are all
small imports no NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import dtypes, packing
from .shape import Shape

if TYPE_CHECKING:
    import numpy as np


class Literal:
    """A constant value of a Shape. Arrays are read-only numpy arrays in row-major order."""

    __slots__ = ("shape", "_array", "_elements", "_data")

    def __init__(self, shape: Shape, array: np.ndarray | None = None,
                 elements: tuple[Literal, ...] = (), *, data: bytes | None = None):
        self.shape = shape
        self._elements = tuple(elements)
        self._array = None
        self._data = None
        if shape.is_tuple:
            if len(self._elements) != len(shape.tuple_shapes):
                raise ValueError("tuple literal element count does not match its shape")
            return
        if not shape.is_array:
            return  # token: no data
        if data is not None:
            if len(data) != shape.byte_size or not packing.LITTLE:
                raise ValueError(f"{len(data)} bytes of data for a literal of shape {shape}")
            self._data = bytes(data)
            return
        import numpy as np

        arr = np.ascontiguousarray(np.asarray(array).astype(shape.np_dtype, copy=False))
        if arr.shape != shape.dims:
            arr = arr.reshape(shape.dims)
        arr.setflags(write=False)
        self._array = arr

    @staticmethod
    def from_array(arr, element_type: dtypes.PrimitiveType | None = None) -> Literal:
        import numpy as np

        arr = np.asarray(arr)
        et = element_type if element_type is not None else dtypes.from_numpy(arr.dtype)
        return Literal(Shape.array(et, arr.shape), arr)

    @staticmethod
    def tuple_of(elements) -> Literal:
        elements = tuple(elements)
        return Literal(Shape.tuple_of(e.shape for e in elements), elements=elements)

    @staticmethod
    def scalar(value, element_type) -> Literal:
        """`value` converted to `element_type` as NumPy converts it."""
        et = dtypes.from_name(element_type) if isinstance(element_type, str) else element_type
        data = packing.pack((value,), et)
        if data is not None:
            return Literal(Shape.scalar(et), data=data)
        import numpy as np

        return Literal(Shape.scalar(et), np.array(value, dtype=dtypes.to_numpy(et)))

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            if self._data is None:
                raise ValueError(f"literal of shape {self.shape} has no array")
            import numpy as np

            self._array = np.frombuffer(self._data, dtype=self.shape.np_dtype).reshape(
                self.shape.dims)
        return self._array

    @property
    def kept_as_bytes(self) -> bool:
        """Made from element bytes (which `data` returns as they are)."""
        return self._data is not None

    @property
    def data(self) -> bytes:
        """The elements' bytes, row-major (what `array.tobytes()` gives)."""
        if self._data is not None:
            return self._data
        return self.array.tobytes()

    def python_values(self) -> tuple | None:
        """The elements, row-major, as Python bools, ints or floats (what
        `array.reshape(-1).tolist()` gives), read without NumPy: None unless the literal is
        kept as bytes of a type packing.FORMATS has."""
        if self._data is None:
            return None
        return packing.unpack(self._data, self.shape.element_type)

    def item(self):
        """The value of a one-element literal: a Python bool, int or float where
        `python_values` reads it (no NumPy), else a NumPy scalar."""
        values = self.python_values()
        return values[0] if values else self.array.reshape(-1)[0]

    def splat_bytes(self) -> bytes | None:
        """The bytes of the one value every element holds; None when they differ, when there
        are none or for a tuple or token."""
        if self.shape.is_tuple or not self.shape.is_array:
            return None
        count = self.shape.num_elements
        if count == 0:
            return None
        data = self.data
        width = len(data) // count
        first = data[:width]
        return first if data == first * count else None

    @property
    def elements(self) -> tuple[Literal, ...]:
        return self._elements

    def flatten(self) -> list[np.ndarray]:
        """Leaf arrays depth-first (how results are numbered out0, out1, ...)."""
        if self.shape.is_tuple:
            return [a for e in self._elements for a in e.flatten()]
        return [self.array] if self._has_data else []

    @property
    def _has_data(self) -> bool:
        return self._array is not None or self._data is not None

    def with_shape(self, shape: Shape) -> Literal:
        """Same data under a layout-different but compatible shape."""
        if shape.is_tuple:
            return Literal(shape, elements=tuple(
                e.with_shape(s) for e, s in zip(self._elements, shape.tuple_shapes, strict=True)))
        if self._array is None and self._data is not None:
            return Literal(shape, data=self._data)
        return Literal(shape, self._array)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Literal) or not self.shape.compatible(other.shape):
            return False
        if self.shape.is_tuple:
            return self._elements == other._elements
        if not self._has_data:
            return not other._has_data
        return other._has_data and self.data == other.data

    def __hash__(self) -> int:
        if self._has_data:
            return hash((self.shape.without_layout(), self.data))
        return hash((self.shape.without_layout(), self._elements))

    def __repr__(self) -> str:
        return f"Literal({self.shape}, {self.array if self._has_data else self._elements})"
