"""Literals: immutable constant values backed by numpy arrays (tuples hold literals)."""

from __future__ import annotations

import numpy as np

from . import dtypes
from .shape import Shape


class Literal:
    """A constant value of a Shape. Arrays are read-only numpy arrays in row-major order."""

    __slots__ = ("shape", "_array", "_elements")

    def __init__(self, shape: Shape, array: np.ndarray | None = None,
                 elements: tuple[Literal, ...] = ()):
        self.shape = shape
        self._elements = tuple(elements)
        self._array = None
        if shape.is_tuple:
            if len(self._elements) != len(shape.tuple_shapes):
                raise ValueError("tuple literal element count does not match its shape")
            return
        if not shape.is_array:
            return  # token: no data
        arr = np.ascontiguousarray(np.asarray(array).astype(shape.np_dtype, copy=False))
        if arr.shape != shape.dims:
            arr = arr.reshape(shape.dims)
        arr.setflags(write=False)
        self._array = arr

    @staticmethod
    def from_array(arr, element_type: dtypes.PrimitiveType | None = None) -> Literal:
        arr = np.asarray(arr)
        et = element_type if element_type is not None else dtypes.from_numpy(arr.dtype)
        return Literal(Shape.array(et, arr.shape), arr)

    @staticmethod
    def tuple_of(elements) -> Literal:
        elements = tuple(elements)
        return Literal(Shape.tuple_of(e.shape for e in elements), elements=elements)

    @staticmethod
    def scalar(value, element_type) -> Literal:
        et = dtypes.from_name(element_type) if isinstance(element_type, str) else element_type
        return Literal(Shape.scalar(et), np.array(value, dtype=dtypes.to_numpy(et)))

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            raise ValueError(f"literal of shape {self.shape} has no array")
        return self._array

    @property
    def elements(self) -> tuple[Literal, ...]:
        return self._elements

    def flatten(self) -> list[np.ndarray]:
        """Leaf arrays depth-first (how results are numbered out0, out1, ...)."""
        if self.shape.is_tuple:
            return [a for e in self._elements for a in e.flatten()]
        return [self.array] if self._array is not None else []

    def with_shape(self, shape: Shape) -> Literal:
        """Same data under a layout-different but compatible shape."""
        if shape.is_tuple:
            return Literal(shape, elements=tuple(
                e.with_shape(s) for e, s in zip(self._elements, shape.tuple_shapes, strict=True)))
        return Literal(shape, self._array)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Literal) or not self.shape.compatible(other.shape):
            return False
        if self.shape.is_tuple:
            return self._elements == other._elements
        if self._array is None:
            return other._array is None
        return self._array.tobytes() == other._array.tobytes()

    def __hash__(self) -> int:
        if self._array is not None:
            return hash((self.shape.without_layout(), self._array.tobytes()))
        return hash((self.shape.without_layout(), self._elements))

    def __repr__(self) -> str:
        return f"Literal({self.shape}, {self._array if self._array is not None else self._elements})"
