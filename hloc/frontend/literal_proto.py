"""LiteralProto <-> hloc.ir.Literal for every element type, bit-exact.

Array data in a LiteralProto is in the physical order of the literal shape's layout; the IR's
literals are logical row-major numpy arrays, so non-row-major layouts are transposed here.
A row-major literal of bytes, or of at most SMALL values of a type ir/packing.py packs, is
kept as element bytes, without NumPy (ir/literal.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hloc.ir import dtypes, packing
from hloc.ir.dtypes import PrimitiveType
from hloc.ir.literal import Literal
from hloc.ir.shape import Shape

from ..util.record import dataclass
from .gen import xla_data_pb2
from .shape_proto import MalformedProto, UnsupportedProto, shape_from_proto, shape_to_proto

if TYPE_CHECKING:
    import numpy as np

P = PrimitiveType
SMALL = 4096  # values of a repeated field packed without NumPy (ir/packing.py)


@dataclass(frozen=True)
class _Storage:
    """Where and how one element type's data lives in a LiteralProto."""

    field: str
    kind: str  # "repeated" (typed repeated field), "bytes" (little-endian bytes), "complex"
    wire: str  # numpy's name of the element type on the wire (complex: the component's)

    def wire_dtype(self) -> np.dtype:
        import numpy as np

        return np.dtype(self.wire)


def _bytes(field: str, wire: str) -> _Storage:
    return _Storage(field, "bytes", wire)


# Sub-byte and 8-bit float types travel one element per byte, in ml_dtypes' byte encoding.
_STORAGE: dict[PrimitiveType, _Storage] = {
    P.PRED: _Storage("preds", "repeated", "bool"),
    P.S8: _bytes("s8s", "i1"),
    P.U8: _bytes("u8s", "u1"),
    P.S16: _bytes("s16s", "<i2"),
    P.U16: _bytes("u16s", "<u2"),
    P.S32: _Storage("s32s", "repeated", "int32"),
    P.S64: _Storage("s64s", "repeated", "int64"),
    P.U32: _Storage("u32s", "repeated", "uint32"),
    P.U64: _Storage("u64s", "repeated", "uint64"),
    P.F16: _bytes("f16s", "<u2"),
    P.BF16: _bytes("bf16s", "<u2"),
    P.F32: _Storage("f32s", "repeated", "float32"),
    P.F64: _Storage("f64s", "repeated", "float64"),
    P.C64: _Storage("c64s", "complex", "float32"),
    P.C128: _Storage("c128s", "complex", "float64"),
    P.F8E5M2: _bytes("f8e5m2s", "u1"),
    P.F8E4M3FN: _bytes("f8e4m3fns", "u1"),
    P.F8E4M3B11FNUZ: _bytes("f8e4m3b11fnuzs", "u1"),
    P.F8E5M2FNUZ: _bytes("f8e5m2fnuzs", "u1"),
    P.F8E4M3FNUZ: _bytes("f8e4m3fnuzs", "u1"),
    P.F8E4M3: _bytes("f8e4m3s", "u1"),
    P.F8E3M4: _bytes("f8e3m4s", "u1"),
    P.F8E8M0FNU: _bytes("f8e8m0fnus", "u1"),
    P.F4E2M1FN: _bytes("f4e2m1fns", "u1"),
    P.S4: _bytes("s4s", "u1"),
    P.U4: _bytes("u4s", "u1"),
    P.S2: _bytes("s2s", "u1"),
    P.U2: _bytes("u2s", "u1"),
}


def _physical_dims(shape: Shape) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """(dims in storage order, permutation storage->logical or None when row-major)."""
    layout = shape.layout
    if layout is None or shape.rank < 2 or layout.is_row_major:
        return shape.dims, None
    major_to_minor = tuple(reversed(layout.minor_to_major))
    return tuple(shape.dims[d] for d in major_to_minor), major_to_minor


def _storage(ptype: PrimitiveType) -> _Storage:
    storage = _STORAGE.get(ptype)
    if storage is None:
        raise UnsupportedProto(f"literals of type {dtypes.name(ptype)} are not supported")
    return storage


def _checked_field(pb: xla_data_pb2.LiteralProto, ptype: PrimitiveType, count: int):
    """(storage, the field's data) after checking its length against `count` elements."""
    storage = _storage(ptype)
    raw = getattr(pb, storage.field)
    if storage.kind == "bytes":
        width = dtypes.info(ptype).byte_size  # the wire's element width too
        if len(raw) != count * width:
            raise MalformedProto(
                f"literal has {len(raw)} bytes of {storage.field}, expected {count * width}"
            )
        return storage, raw
    width = 2 if storage.kind == "complex" else 1
    if len(raw) != count * width:
        raise MalformedProto(
            f"literal has {len(raw)} values in {storage.field}, expected {count * width}"
        )
    return storage, raw


def _element_bytes(storage: _Storage, raw, ptype: PrimitiveType) -> bytes | None:
    """The literal's element bytes without NumPy, or None where NumPy must convert them."""
    if not packing.LITTLE:
        return None
    if storage.kind == "bytes":
        return bytes(raw)
    if storage.kind == "repeated" and len(raw) <= SMALL:
        return packing.pack(list(raw), ptype)
    return None


def _decode_flat(storage: _Storage, raw, ptype: PrimitiveType) -> np.ndarray:
    import numpy as np

    target = dtypes.to_numpy(ptype)
    wire = storage.wire_dtype()
    if storage.kind == "bytes":
        native = np.frombuffer(raw, dtype=wire).astype(wire.newbyteorder("="))
        return native.view(target)
    flat = np.array(raw, dtype=wire)
    return flat.view(target) if storage.kind == "complex" else flat


def literal_from_proto(pb: xla_data_pb2.LiteralProto) -> Literal:
    """A Literal; MalformedProto when the data does not match the shape."""
    if not pb.HasField("shape"):
        raise MalformedProto("literal has no shape")
    shape = shape_from_proto(pb.shape)
    return _literal_of_shape(pb, shape)


def _literal_of_shape(pb: xla_data_pb2.LiteralProto, shape: Shape) -> Literal:
    if shape.is_tuple:
        if len(pb.tuple_literals) != len(shape.tuple_shapes):
            raise MalformedProto(
                f"tuple literal has {len(pb.tuple_literals)} elements, "
                f"its shape {len(shape.tuple_shapes)}"
            )
        elements = tuple(
            _literal_of_shape(e, s)
            for e, s in zip(pb.tuple_literals, shape.tuple_shapes, strict=True)
        )
        return Literal(shape, elements=elements)
    if not shape.is_array or shape.element_type == P.BUFFER:
        if shape.element_type != P.TOKEN:
            raise UnsupportedProto(f"literals of type {shape.dtype.name} are not supported")
        return Literal(shape)
    physical, perm = _physical_dims(shape)
    storage, raw = _checked_field(pb, shape.element_type, shape.num_elements)
    if perm is None:
        data = _element_bytes(storage, raw, shape.element_type)
        if data is not None:
            return Literal(shape, data=data)
    import numpy as np

    array = _decode_flat(storage, raw, shape.element_type).reshape(physical)
    if perm is not None:
        array = array.transpose(np.argsort(perm))
    return Literal(shape, array)


def _encode_flat(array: np.ndarray, ptype: PrimitiveType, out: xla_data_pb2.LiteralProto) -> None:
    import numpy as np

    storage = _storage(ptype)
    wire = storage.wire_dtype()
    flat = np.ascontiguousarray(array).reshape(-1)
    if storage.kind == "bytes":
        setattr(
            out,
            storage.field,
            flat.view(wire.newbyteorder("=")).astype(wire, copy=False).tobytes(),
        )
        return
    values = flat.view(wire) if storage.kind == "complex" else flat
    getattr(out, storage.field).extend(values.tolist())


def _encode_bytes(literal: Literal, out: xla_data_pb2.LiteralProto) -> bool:
    """Fill `out`'s data field from a row-major literal kept as bytes, without NumPy; False
    when that takes NumPy (the literal has an array, or a repeated field of a type
    ir/packing.py does not unpack)."""
    storage = _storage(literal.shape.element_type)
    if not literal.kept_as_bytes:
        return False
    if storage.kind == "bytes":
        setattr(out, storage.field, literal.data)
        return True
    values = packing.unpack(literal.data, literal.shape.element_type)
    if storage.kind != "repeated" or values is None:
        return False
    getattr(out, storage.field).extend(values)
    return True


def literal_to_proto(
    literal: Literal, out: xla_data_pb2.LiteralProto | None = None
) -> xla_data_pb2.LiteralProto:
    """Fill (or create) a LiteralProto with the literal's data in its layout's order."""
    pb = out if out is not None else xla_data_pb2.LiteralProto()
    shape = literal.shape
    shape_to_proto(shape, pb.shape)
    if shape.is_tuple:
        for element in literal.elements:
            literal_to_proto(element, pb.tuple_literals.add())
        return pb
    if not shape.is_array or shape.element_type == P.BUFFER:
        return pb
    _, perm = _physical_dims(shape)
    if perm is None and _encode_bytes(literal, pb):
        return pb
    array = literal.array if perm is None else literal.array.transpose(perm)
    _encode_flat(array, shape.element_type, pb)
    return pb


def literal_to_bytes(literal: Literal) -> bytes:
    """A serialized LiteralProto (deterministic), e.g. snapshot arguments kept in a bundle."""
    return literal_to_proto(literal).SerializeToString(deterministic=True)


def literal_from_bytes(data: bytes, path: str = "<literal>") -> Literal:
    """The Literal of serialized LiteralProto bytes; InputError naming `path` if malformed."""
    from google.protobuf.message import DecodeError

    from hloc.errors import InputError

    pb = xla_data_pb2.LiteralProto()
    try:
        pb.ParseFromString(bytes(data))
        return literal_from_proto(pb)
    except (DecodeError, MalformedProto) as e:
        raise InputError(f"malformed literal: {e}", path) from None
