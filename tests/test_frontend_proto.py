"""Frontend: HloModuleProto <-> IR round trips on every sample, literals, shardings."""

from __future__ import annotations

import re
import struct

import ml_dtypes
import numpy as np
import pytest

from hloc.frontend import (
    literal_from_proto,
    literal_to_proto,
    load,
    load_bytes,
    module_to_proto,
    to_hlo_proto_bytes,
)
from hloc.frontend.gen import hlo_pb2, xla_data_pb2
from hloc.frontend.sharding import sharding_from_text, sharding_to_text
from hloc.ir import Layout, Literal, PrimitiveType, Shape
from tests.conftest import IN_CI, SAMPLES

pytestmark = pytest.mark.pure

# Fields XLA writes that the IR deliberately does not model (cleared before comparing):
UNMODELED = {
    ("HloModuleProto", "stack_frame_index"),  # source-location tables (metadata keeps the ids)
    ("HloModuleProto", "device_assignment"),  # single-device compiles need none
    ("HloInstructionProto", "statistics_viz"),  # profiler visualization data
    ("HloInstructionProto", "sparsity_config"),  # XLA writes it empty; non-empty is rejected
    ("LayoutProto", "tail_padding_alignment_in_elements"),  # always 1 (= unset) in practice
}


def all_sample_protos() -> list[str]:
    paths = sorted(SAMPLES.glob("*.pb")) + sorted(SAMPLES.glob("ops/*.pb"))
    return [str(p.relative_to(SAMPLES)) for p in paths]


SAMPLE_PROTOS = all_sample_protos()


def require(paths: list[str]) -> None:
    if not paths:
        if IN_CI:
            pytest.fail("samples/ has no .pb files: the sample corpus must be committed")
        pytest.skip("no samples generated")


def strip_unmodeled(msg) -> None:
    for fd, value in msg.ListFields():
        if (msg.DESCRIPTOR.name, fd.name) in UNMODELED:
            msg.ClearField(fd.name)
        elif fd.message_type is not None and not fd.message_type.GetOptions().map_entry:
            for v in value if fd.is_repeated else [value]:
                strip_unmodeled(v)


def _scalar_key(v):
    # Floats compare by bit pattern so NaN payloads and signed zeros count.
    return struct.pack("<d", v) if isinstance(v, float) else v


def proto_diffs(a, b, path: str = "") -> list[str]:
    """Every field-level difference between two messages, presence included (ListFields)."""
    fa = {fd.name: (fd, v) for fd, v in a.ListFields()}
    fb = {fd.name: (fd, v) for fd, v in b.ListFields()}
    out = []
    for name in sorted(set(fa) | set(fb)):
        where = f"{path}.{name}"
        if name not in fa or name not in fb:
            out.append(f"{where}: only in {'original' if name in fa else 'round trip'}")
            continue
        fd, va = fa[name]
        vb = fb[name][1]
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            if dict(va) != dict(vb):
                out.append(f"{where}: map differs")
        elif fd.message_type is not None and fd.is_repeated:
            if len(va) != len(vb):
                out.append(f"{where}: {len(va)} vs {len(vb)} elements")
                continue
            for i, (x, y) in enumerate(zip(va, vb, strict=True)):
                out.extend(proto_diffs(x, y, f"{where}[{i}]"))
        elif fd.message_type is not None:
            out.extend(proto_diffs(va, vb, where))
        elif fd.is_repeated:
            if [_scalar_key(x) for x in va] != [_scalar_key(x) for x in vb]:
                out.append(f"{where}: {list(va)[:6]} vs {list(vb)[:6]}")
        elif _scalar_key(va) != _scalar_key(vb):
            out.append(f"{where}: {va!r} vs {vb!r}")
    return out


@pytest.mark.parametrize("rel", SAMPLE_PROTOS or ["<none>"])
def test_round_trip_is_field_equal(rel):
    require(SAMPLE_PROTOS)
    data = (SAMPLES / rel).read_bytes()
    original = hlo_pb2.HloModuleProto.FromString(data)
    loaded = load_bytes(data, rel)
    assert loaded.form == "HloModuleProto"
    again = module_to_proto(loaded.module)
    strip_unmodeled(original)
    strip_unmodeled(again)
    diffs = proto_diffs(original, again)
    assert not diffs, f"{rel}: {len(diffs)} differences, e.g.\n" + "\n".join(diffs[:20])


@pytest.mark.parametrize("rel", SAMPLE_PROTOS or ["<none>"])
def test_serialization_is_deterministic_and_stable(rel):
    require(SAMPLE_PROTOS)
    module = load(SAMPLES / rel).module
    first = to_hlo_proto_bytes(module)
    assert first == to_hlo_proto_bytes(module)
    assert to_hlo_proto_bytes(load_bytes(first, rel).module) == first


_TEXT_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.+?)\s+([a-z][a-z0-9\-]*)\(", re.M)


@pytest.mark.parametrize("rel", [p for p in SAMPLE_PROTOS] or ["<none>"])
def test_names_opcodes_shapes_match_xla_text(rel):
    """XLA's own text dump of the same module is the oracle for what the proto says."""
    require(SAMPLE_PROTOS)
    text_path = SAMPLES / rel.replace(".pb", ".hlo")
    if not text_path.exists():
        pytest.fail(f"{text_path} missing next to {rel}")
    expected = {m[0]: (m[2], m[1]) for m in _TEXT_INSTR.findall(text_path.read_text())}
    module = load(SAMPLES / rel).module
    got = {
        i.name: (i.opcode.text, i.shape.to_text())
        for c in module.computations
        for i in c.instructions
    }
    assert set(got) == set(expected)
    for name, (opcode, shape_text) in got.items():
        assert opcode == expected[name][0], name
        # XLA's text omits the layout of some scalars/tuple elements; compare without layouts.
        assert _no_layout(shape_text) == _no_layout(expected[name][1]), name


def _no_layout(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text)  # XLA marks long tuples with /*index=N*/
    return re.sub(r"\{[^{}]*\}", "", text).replace(" ", "")


# ---- literals ------------------------------------------------------------------------------------
_ALL_TYPES = [
    ("pred", np.bool_),
    ("s8", np.int8),
    ("u8", np.uint8),
    ("s16", np.int16),
    ("u16", np.uint16),
    ("s32", np.int32),
    ("u32", np.uint32),
    ("s64", np.int64),
    ("u64", np.uint64),
    ("f16", np.float16),
    ("bf16", ml_dtypes.bfloat16),
    ("f32", np.float32),
    ("f64", np.float64),
    ("c64", np.complex64),
    ("c128", np.complex128),
    ("f8e5m2", ml_dtypes.float8_e5m2),
    ("f8e4m3fn", ml_dtypes.float8_e4m3fn),
    ("f8e4m3b11fnuz", ml_dtypes.float8_e4m3b11fnuz),
    ("f8e5m2fnuz", ml_dtypes.float8_e5m2fnuz),
    ("f8e4m3fnuz", ml_dtypes.float8_e4m3fnuz),
    ("f8e4m3", ml_dtypes.float8_e4m3),
    ("f8e3m4", ml_dtypes.float8_e3m4),
    ("f8e8m0fnu", ml_dtypes.float8_e8m0fnu),
    ("f4e2m1fn", ml_dtypes.float4_e2m1fn),
    ("s4", ml_dtypes.int4),
    ("u4", ml_dtypes.uint4),
    ("s2", ml_dtypes.int2),
    ("u2", ml_dtypes.uint2),
]


def _random_array(dtype, shape, rng) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    try:
        info = ml_dtypes.iinfo(dtype)
    except (ValueError, TypeError):
        info = None
    if info is not None:
        wide = np.int64 if int(info.min) < 0 else np.uint64
        return rng.integers(int(info.min), int(info.max), shape, endpoint=True, dtype=wide).astype(
            dtype
        )
    values = (rng.standard_normal(shape) * 2).astype(np.float32)
    values.flat[:3] = [np.nan, -0.0, np.inf]  # bit patterns that must survive exactly
    return values.astype(dtype)


@pytest.mark.parametrize("name,dtype", _ALL_TYPES, ids=[t[0] for t in _ALL_TYPES])
def test_literal_round_trip_every_type(name, dtype):
    rng = np.random.default_rng(len(name))
    array = _random_array(dtype, (3, 5), rng)
    literal = Literal.from_array(array, PrimitiveType[name.upper()])
    pb = literal_to_proto(literal)
    back = literal_from_proto(xla_data_pb2.LiteralProto.FromString(pb.SerializeToString()))
    assert back.shape == literal.shape
    assert back.array.dtype == np.dtype(dtype)
    assert back.array.tobytes() == array.tobytes()


def test_literal_wire_encodings_match_xla_conventions():
    """16-bit types are little-endian bytes, complex numbers interleave (re, im)."""
    bf = np.array([1.5, -2.0, np.inf], dtype=ml_dtypes.bfloat16)
    pb = literal_to_proto(Literal.from_array(bf))
    assert pb.bf16s == bf.view(np.uint16).astype("<u2").tobytes()
    h = np.array([[0.5, -1.0]], dtype=np.float16)
    assert literal_to_proto(Literal.from_array(h)).f16s == h.astype("<f2").tobytes()
    c = np.array([1 + 2j, 3 - 4j], dtype=np.complex64)
    assert list(literal_to_proto(Literal.from_array(c)).c64s) == [1.0, 2.0, 3.0, -4.0]
    s4 = np.array([-8, -1, 0, 7], dtype=ml_dtypes.int4)
    assert len(literal_to_proto(Literal.from_array(s4)).s4s) == 4  # one element per byte


def test_literal_data_follows_its_layout():
    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    shape = Shape.array("s32", (2, 3), Layout((0, 1)))  # column-major
    pb = literal_to_proto(Literal(shape, array))
    assert list(pb.s32s) == list(array.T.ravel())
    back = literal_from_proto(pb)
    assert np.array_equal(back.array, array)
    assert back.shape.layout == Layout((0, 1))


def test_tuple_and_token_literals():
    inner = Literal.tuple_of([Literal.scalar(True, "pred"), Literal.from_array(np.ones(2))])
    nested = Literal.tuple_of([Literal.from_array(np.arange(3, dtype=np.uint64)), inner])
    back = literal_from_proto(literal_to_proto(nested))
    assert back == nested
    assert back.elements[1].elements[0].array.dtype == np.bool_


# ---- shardings -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "{replicated}",
        "{manual}",
        "{maximal device=3}",
        "{devices=[2,1]0,1}",
        "{devices=[2,2]<=[4]}",
        "{devices=[2,2]<=[2,2]T(1,0)}",
        "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
        "{devices=[1,2,2]0,1,2,3 last_tile_dims={manual}}",
        "{{replicated}, {maximal device=0}, {devices=[2]0,1}}",
    ],
)
def test_sharding_text_round_trip(text):
    pb = sharding_from_text(text)
    again = xla_data_pb2.OpSharding.FromString(pb.SerializeToString())
    assert sharding_to_text(again) == text


def test_sharding_proto_matches_xla_encoding():
    pb = sharding_from_text("{maximal device=2}")
    assert pb.type == xla_data_pb2.OpSharding.MAXIMAL
    assert list(pb.tile_assignment_devices) == [2]
    tiled = sharding_from_text("{devices=[2,1]1,0}")
    assert tiled.type == xla_data_pb2.OpSharding.OTHER
    assert list(tiled.tile_assignment_dimensions) == [2, 1]
    assert list(tiled.tile_assignment_devices) == [1, 0]


@pytest.mark.parametrize("spelled,largest", [("", True), (", largest=true", True),
                                             (", largest=false", False)])
def test_topk_largest_survives_proto(spelled, largest):
    """XLA's text defaults largest to true, its proto (proto3, no presence) reads an absent
    field as false: a text module's topk keeps its direction through a proto (a CUDA bundle
    stores one), and a proto TopK without the field is a smallest-k."""
    from hloc.ir.text.parser import parse_module

    module = parse_module(f"""HloModule m
ENTRY e {{
  a = f32[4,9] parameter(0)
  ROOT t = (f32[4,3], s32[4,3]) topk(a), k=3{spelled}
}}""")
    pb = module_to_proto(module)
    (topk,) = [i for c in pb.computations for i in c.instructions if i.opcode == "topk"]
    assert topk.largest is largest
    back = load_bytes(pb.SerializeToString()).module.entry.root
    assert (back.attrs.largest is not False) is largest
    topk.ClearField("largest")
    assert load_bytes(pb.SerializeToString()).module.entry.root.attrs.largest is False
