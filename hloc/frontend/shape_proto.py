"""ShapeProto / LayoutProto <-> hloc.ir.Shape / Layout."""

from __future__ import annotations

from hloc.ir import dtypes
from hloc.ir.dtypes import PrimitiveType
from hloc.ir.shape import Layout, Shape, Tile

from .gen import xla_data_pb2

# Element types XLA defines but hloc's IR has no PrimitiveType for (wire value -> name).
_KNOWN_UNSUPPORTED_TYPES = {35: "f6e3m2fn", 36: "f6e2m3fn"}
# Protobuf's own recursion limit is 100; deeper tuple nesting is never real.
_MAX_TUPLE_DEPTH = 64


def quote(text: str) -> str:
    """'text', or its repr when it holds control characters (messages stay on one line)."""
    return f"'{text}'" if text.isprintable() else repr(text)


class MalformedProto(Exception):
    """A structural problem in a proto; callers add the file/computation/instruction context."""


class UnsupportedProto(Exception):
    """A well-formed proto using something hloc does not implement."""


def element_type_from_proto(value: int) -> PrimitiveType:
    """A PrimitiveType from its wire value; MalformedProto for values XLA does not define."""
    if value in _KNOWN_UNSUPPORTED_TYPES:
        raise UnsupportedProto(f"element type {_KNOWN_UNSUPPORTED_TYPES[value]} is not supported")
    try:
        ptype = PrimitiveType(value)
    except ValueError:
        raise MalformedProto(f"invalid element type {value}") from None
    if ptype == PrimitiveType.INVALID:
        raise MalformedProto("element type is unset (INVALID)")
    return ptype


def layout_from_proto(pb: xla_data_pb2.LayoutProto, rank: int | None) -> Layout:
    """A Layout; `rank` (None for non-arrays) checks minor_to_major is a permutation."""
    m2m = tuple(pb.minor_to_major)
    if rank is not None and sorted(m2m) != list(range(rank)):
        raise MalformedProto(
            f"layout minor_to_major {list(m2m)} is not a permutation of the {rank} dimensions"
        )
    tiles = tuple(Tile(tuple(t.dimensions)) for t in pb.tiles)
    if pb.element_size_in_bits < 0 or pb.memory_space < 0:
        raise MalformedProto("layout has a negative element size or memory space")
    return Layout(m2m, tiles, pb.element_size_in_bits, pb.memory_space)


_SHAPE_CACHE: dict[bytes, Shape] = {}


def shape_from_proto(pb: xla_data_pb2.ShapeProto, depth: int = 0) -> Shape:
    """A Shape; layouts and dynamic dimensions are kept as written.

    Shapes are immutable and modules repeat a few of them thousands of times, so decoded
    shapes are memoized by their wire bytes (bounded).
    """
    key = pb.SerializeToString(deterministic=True)
    shape = _SHAPE_CACHE.get(key)
    if shape is None:
        shape = _decode_shape(pb, depth)
        if len(_SHAPE_CACHE) > 8192:
            _SHAPE_CACHE.clear()
        _SHAPE_CACHE[key] = shape
    return shape


def _decode_shape(pb: xla_data_pb2.ShapeProto, depth: int) -> Shape:
    if depth > _MAX_TUPLE_DEPTH:
        raise MalformedProto("tuple shapes nested too deeply")
    et = element_type_from_proto(pb.element_type)
    layout = None
    if et == PrimitiveType.TUPLE:
        if pb.dimensions:
            raise MalformedProto("a tuple shape has dimensions")
        elements = tuple(shape_from_proto(s, depth + 1) for s in pb.tuple_shapes)
        if pb.HasField("layout"):
            layout = layout_from_proto(pb.layout, None)
        return Shape(et, (), layout, elements)
    if pb.tuple_shapes and et != PrimitiveType.BUFFER:
        raise MalformedProto(f"a {dtypes.name(et)} shape has tuple elements")
    dims = tuple(pb.dimensions)
    if any(d < 0 for d in dims):
        raise MalformedProto(f"shape has a negative dimension {list(dims)}")
    dyn = tuple(pb.is_dynamic_dimension)
    if dyn and len(dyn) != len(dims):
        raise MalformedProto("is_dynamic_dimension does not match the number of dimensions")
    is_array = et not in (PrimitiveType.TOKEN, PrimitiveType.OPAQUE_TYPE, PrimitiveType.BUFFER)
    if pb.HasField("layout"):
        layout = layout_from_proto(pb.layout, len(dims) if is_array else None)
    # The IR spells "no dynamic dimension" as (); XLA writes explicit falses (restored on export).
    return Shape(et, dims, layout, (), dyn if any(dyn) else ())


def layout_to_proto(layout: Layout, out: xla_data_pb2.LayoutProto) -> None:
    out.SetInParent()
    out.minor_to_major.extend(layout.minor_to_major)
    for tile in layout.tiles:
        out.tiles.add().dimensions.extend(tile.dims)
    out.element_size_in_bits = layout.element_size_in_bits
    out.memory_space = layout.memory_space


def shape_to_proto(
    shape: Shape, out: xla_data_pb2.ShapeProto | None = None
) -> xla_data_pb2.ShapeProto:
    """Fill (or create) a ShapeProto. Arrays always list is_dynamic_dimension, as XLA does."""
    pb = out if out is not None else xla_data_pb2.ShapeProto()
    pb.element_type = int(shape.element_type)
    pb.dimensions.extend(shape.dims)
    for element in shape.tuple_shapes:
        shape_to_proto(element, pb.tuple_shapes.add())
    if shape.layout is not None:
        layout_to_proto(shape.layout, pb.layout)
    if shape.is_array and not shape.is_tuple:
        dyn = shape.dynamic_dims or (False,) * len(shape.dims)
        pb.is_dynamic_dimension.extend(dyn)
    return pb
