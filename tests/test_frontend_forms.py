"""Frontend: the five MODEL forms, detection by content, malformed inputs, saving."""

from __future__ import annotations

import os
import random
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hloc.errors import InputError, UnsupportedError
from hloc.frontend import (
    load,
    load_bytes,
    make_hlo_proto,
    make_snapshot,
    module_from_proto,
    save,
    to_hlo_proto_bytes,
)
from hloc.frontend.gen import hlo_pb2, xla_data_pb2
from hloc.frontend.load import _as_hlo_text
from hloc.ir import Literal, dtypes
from tests.conftest import IN_CI, SAMPLES, sample_arrays, sample_meta, sample_names

pytestmark = pytest.mark.pure


def _require() -> list[str]:
    names = sample_names()
    if not names:
        if IN_CI:
            pytest.fail("samples/ is empty: the sample corpus must be committed")
        pytest.skip("no samples generated")
    return names


def _smallest_sample() -> str:
    names = _require()
    return min(names, key=lambda n: (SAMPLES / f"{n}.pb").stat().st_size)


def _module_pb(name: str) -> hlo_pb2.HloModuleProto:
    return hlo_pb2.HloModuleProto.FromString((SAMPLES / f"{name}.pb").read_bytes())


def _literals(name: str, kind: str) -> list[Literal]:
    meta_key = "params" if kind == "inputs" else "outputs"
    entries = sample_meta(name)[meta_key]
    return [
        Literal.from_array(a, dtypes.from_name(e["dtype"]))
        for a, e in zip(sample_arrays(name, kind), entries, strict=True)
    ]


# ---- each form ------------------------------------------------------------------------------------
def test_module_proto_form(tmp_path):
    name = _smallest_sample()
    path = tmp_path / "model.hlo"  # a misleading extension: detection is by content
    path.write_bytes((SAMPLES / f"{name}.pb").read_bytes())
    loaded = load(path)
    assert loaded.form == "HloModuleProto"
    assert loaded.module.name == _module_pb(name).name
    assert loaded.arguments is None and loaded.result is None


def test_hlo_proto_form_with_buffer_assignment():
    name = _smallest_sample()
    pb = hlo_pb2.HloProto()
    pb.hlo_module.CopyFrom(_module_pb(name))
    buf = pb.buffer_assignment.logical_buffers.add(id=1, size=64)
    buf.defined_at.instruction_id = pb.hlo_module.computations[0].instructions[0].id
    pb.buffer_assignment.buffer_allocations.add(index=0, size=64)
    loaded = load_bytes(pb.SerializeToString(), "x.pb")
    assert loaded.form == "HloProto"
    assert to_hlo_proto_bytes(loaded.module) == to_hlo_proto_bytes(
        load_bytes((SAMPLES / f"{name}.pb").read_bytes()).module
    )


def test_hlo_proto_written_by_make_hlo_proto():
    name = _smallest_sample()
    module = load(SAMPLES / f"{name}.pb").module
    assert load_bytes(make_hlo_proto(module)).form == "HloProto"


def test_with_config_form_takes_config():
    name = _smallest_sample()
    pb = hlo_pb2.HloModuleProtoWithConfig()
    pb.hlo_module.CopyFrom(_module_pb(name))
    pb.config.replica_count = 2
    pb.config.num_partitions = 3
    pb.config.seed = 77
    loaded = load_bytes(pb.SerializeToString(), "cfg.pb")
    assert loaded.form == "HloModuleProtoWithConfig"
    config = loaded.module.config
    assert (config.replica_count, config.num_partitions, config.seed) == (2, 3, 77)


@pytest.mark.parametrize("which", ["first", "dtypes"])
def test_snapshot_keeps_arguments_and_result_bit_exact(which):
    names = _require()
    wanted = "dtype_zoo" if which == "dtypes" and "dtype_zoo" in names else _smallest_sample()
    module = load(SAMPLES / f"{wanted}.pb").module
    args = _literals(wanted, "inputs")
    outs = _literals(wanted, "expected")
    result = (
        outs[0]
        if len(outs) == 1 and not module.entry.root.shape.is_tuple
        else Literal.tuple_of(outs)
    )
    loaded = load_bytes(make_snapshot(module, args, result), "snap.pb")
    assert loaded.form == "HloSnapshot"
    assert len(loaded.arguments) == len(args)
    for got, want in zip(loaded.arguments, args, strict=True):
        assert got.shape.compatible(want.shape)
        assert got.array.dtype == want.array.dtype
        assert got.array.tobytes() == want.array.tobytes()
    assert [a.tobytes() for a in loaded.result.flatten()] == [o.array.tobytes() for o in outs]


def test_snapshot_without_arguments():
    name = _smallest_sample()
    module = load(SAMPLES / f"{name}.pb").module
    loaded = load_bytes(make_snapshot(module, []))
    assert loaded.form == "HloSnapshot" and loaded.arguments == () and loaded.result is None


def test_text_form_detected_by_content(tmp_path, monkeypatch):
    name = _smallest_sample()
    text = (SAMPLES / f"{name}.hlo").read_text()
    calls = []
    from hloc.ir.text.parser import parse_module

    fake = types.ModuleType("hloc.ir.text.parser")
    fake.parse_module = lambda t, path=None: calls.append((t, path)) or parse_module(t, path=path)
    monkeypatch.setitem(sys.modules, "hloc.ir.text.parser", fake)
    path = tmp_path / "model.pb"  # extension says proto, content says text
    path.write_text("// a comment\n/* block */\n" + text)
    loaded = load(path)
    assert loaded.form == "text" and loaded.module.name
    assert calls and calls[0][1] == str(path)


def test_text_detection_rules():
    assert _as_hlo_text(b"  \n// c\nHloModule m\n") is not None
    assert _as_hlo_text(b"/* x */ HloModule m") is not None
    assert _as_hlo_text(b"ENTRY main {}") is None
    assert _as_hlo_text(b"HloModule \x00\x12") is None
    assert _as_hlo_text(b"\xff\xfeHloModule") is None


# ---- malformed inputs ---------------------------------------------------------------------------------
def _expect_input_error(data: bytes, *words: str) -> InputError:
    with pytest.raises(InputError) as info:
        load_bytes(data, "bad.pb")
    message = str(info.value)
    assert message.startswith("bad.pb: ") and "\n" not in message
    for w in words:
        assert w in message, message
    return info.value


def test_empty_and_random_bytes():
    _expect_input_error(b"", "empty")
    rng = random.Random(5)
    for n in (1, 7, 100, 5000):
        _expect_input_error(bytes(rng.randrange(256) for _ in range(n)), "not an HLO module")
    _expect_input_error(b"hello world\n", "HloModule")


def test_truncated_protos():
    name = _smallest_sample()
    data = (SAMPLES / f"{name}.pb").read_bytes()
    for cut in (1, 2, 10, len(data) // 3, len(data) // 2, len(data) - 1):
        _expect_input_error(data[:cut])


def _mutated(name: str, mutate) -> bytes:
    pb = _module_pb(name)
    mutate(pb)
    return pb.SerializeToString()


def _entry(pb):
    return next(c for c in pb.computations if c.id == pb.entry_computation_id)


def _set_opcode(pb):
    _entry(pb).instructions[-1].opcode = "frobnicate"


def test_unknown_opcode_names_instruction_and_opcode():
    name = _smallest_sample()
    pb = _module_pb(name)
    victim = _entry(pb).instructions[-1]
    _expect_input_error(_mutated(name, _set_opcode), "frobnicate", victim.name, _entry(pb).name)


def _with_operand(pb):
    ins = next(i for c in pb.computations for i in c.instructions if i.operand_ids)
    ins.operand_ids[0] = 987654321


def _dup_id(pb):
    comp = _entry(pb)
    comp.instructions[1].id = comp.instructions[0].id


def _bad_root(pb):
    _entry(pb).root_id = 123456789


def _bad_entry(pb):
    pb.entry_computation_id = 999999
    pb.entry_computation_name = "nope"


def _bad_enum(pb):
    _entry(pb).instructions[0].shape.element_type = 99


def _bad_layout(pb):
    for ins in (i for c in pb.computations for i in c.instructions):
        if len(ins.shape.dimensions) >= 1:
            ins.shape.layout.minor_to_major.append(7)
            return
    raise AssertionError("no array shape")


def _no_computations(pb):
    del pb.computations[:]


def _gte_out_of_range(pb):
    comp = _entry(pb)
    param = comp.instructions.add(
        name="param.bad", opcode="parameter", id=424241, parameter_number=1000
    )
    param.shape.element_type = xla_data_pb2.TUPLE
    param.shape.tuple_shapes.add().element_type = xla_data_pb2.F32
    gte = comp.instructions.add(
        name="gte.bad", opcode="get-tuple-element", id=424242, tuple_index=5, operand_ids=[param.id]
    )
    gte.shape.element_type = xla_data_pb2.F32


@pytest.mark.parametrize(
    "mutate,words",
    [
        (_with_operand, ("987654321",)),
        (_dup_id, ("duplicate instruction id",)),
        (_bad_root, ("root id 123456789",)),
        (_bad_entry, ("missing entry",)),
        (_bad_enum, ("element type 99",)),
        (_bad_layout, ("minor_to_major",)),
        (_no_computations, ("not an HLO module",)),
        (_gte_out_of_range, ("tuple index 5",)),
    ],
    ids=lambda v: getattr(v, "__name__", "words"),
)
def test_malformed_modules(mutate, words):
    _expect_input_error(_mutated(_smallest_sample(), mutate), *words)


def test_comparison_direction_enum_checked():
    names = _require()
    for name in names:
        pb = _module_pb(name)
        compares = [i for c in pb.computations for i in c.instructions if i.opcode == "compare"]
        if compares:
            compares[0].comparison_direction = "XX"
            _expect_input_error(pb.SerializeToString(), "comparison direction", compares[0].name)
            return
    pytest.fail("no sample has a compare instruction")


def test_module_from_proto_names_the_path():
    pb = hlo_pb2.HloModuleProto(name="m")
    with pytest.raises(InputError, match="^where.pb: "):
        module_from_proto(pb, path="where.pb")


def test_file_errors(tmp_path, monkeypatch):
    with pytest.raises(InputError, match="no such file"):
        load(tmp_path / "missing.pb")
    with pytest.raises(InputError, match="directory"):
        load(tmp_path)
    (tmp_path / "empty.pb").write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        load(tmp_path / "empty.pb")
    locked = tmp_path / "locked.pb"
    locked.write_bytes(b"x")

    def deny(self):  # tests often run as root, where chmod 000 does not stop a read
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", deny)
    with pytest.raises(InputError, match="permission denied") as info:
        load(locked)
    assert info.value.path == str(locked)


_FUZZ_DATA: dict[str, bytes] = {}


def _fuzz_base() -> bytes:
    if "data" not in _FUZZ_DATA:
        _FUZZ_DATA["data"] = (SAMPLES / f"{_smallest_sample()}.pb").read_bytes()
    return _FUZZ_DATA["data"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 1 << 30),
            st.integers(0, 255),
            st.sampled_from(["set", "insert", "delete"]),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_mutated_bytes_load_or_raise_input_error(edits):
    data = bytearray(_fuzz_base())
    for pos, value, kind in edits:
        pos %= len(data) + 1
        if kind == "insert":
            data[pos:pos] = bytes([value])
        elif pos < len(data):
            if kind == "set":
                data[pos] = value
            else:
                del data[pos]
    try:
        loaded = load_bytes(bytes(data), "fuzz.pb")
    except (InputError, UnsupportedError):
        # UnsupportedError: a mutation produced a valid module using something hloc lacks
        # (e.g. an f6 element type); it is the same clean, one-line exit-2 error.
        return
    # Whatever loads must also write back, and reload to the same bytes.
    first = to_hlo_proto_bytes(loaded.module)
    assert to_hlo_proto_bytes(load_bytes(first).module) == first


def test_fuzz_has_samples():
    _require()


# ---- saving --------------------------------------------------------------------------------------
def test_save_pb_is_atomic_and_deterministic(tmp_path):
    name = _smallest_sample()
    module = load(SAMPLES / f"{name}.pb").module
    out = tmp_path / "out.pb"
    save(module, out, "pb")
    save(module, tmp_path / "again.pb", "pb")
    assert out.read_bytes() == (tmp_path / "again.pb").read_bytes()
    assert out.read_bytes() == to_hlo_proto_bytes(module)
    assert sorted(os.listdir(tmp_path)) == ["again.pb", "out.pb"]  # no temp files left


def test_save_text_uses_printer(tmp_path, monkeypatch):
    name = _smallest_sample()
    module = load(SAMPLES / f"{name}.pb").module
    fake = types.ModuleType("hloc.ir.text.printer")
    fake.print_module = lambda m: f"HloModule {m.name}\n"
    monkeypatch.setitem(sys.modules, "hloc.ir.text.printer", fake)
    save(module, tmp_path / "m.hlo", "hlo")
    assert (tmp_path / "m.hlo").read_text() == f"HloModule {module.name}\n"


def test_save_errors(tmp_path):
    name = _smallest_sample()
    module = load(SAMPLES / f"{name}.pb").module
    with pytest.raises(InputError, match="unknown output format"):
        save(module, tmp_path / "x.bin", "bin")
    with pytest.raises(InputError, match="cannot write"):
        save(module, tmp_path / "no" / "such" / "dir.pb", "pb")


def test_snapshot_literal_dtypes_are_kept():
    name = _smallest_sample()
    module = load(SAMPLES / f"{name}.pb").module
    arg = Literal.from_array(np.array([[1, 2], [3, 4]], dtype=np.int16))
    loaded = load_bytes(make_snapshot(module, [arg]))
    assert loaded.arguments[0].array.dtype == np.int16
    assert np.array_equal(loaded.arguments[0].array, arg.array)
