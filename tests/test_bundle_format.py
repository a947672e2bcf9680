"""Bundle format v1: round trips, determinism, zip inspectability, atomic writes, the schema."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from hloc.bundle import FORMAT_VERSION, entry_section, manifest_problem, read_bundle, write_bundle
from hloc.bundle.format import HEADER_SIZE, MAGIC, Header, canonical_json
from hloc.errors import UnsupportedError
from hloc.ir import Attrs, Computation, Module, Opcode, Shape

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schemas" / "bundle-manifest.schema.json"
PACKAGED_SCHEMA = ROOT / "hloc" / "schemas" / "bundle-manifest.schema.json"

pytestmark = pytest.mark.pure


def make_manifest() -> dict:
    """A valid manifest without `members` (the writer adds them)."""
    return {
        "hloc_version": "0.1.0",
        "target": {"kind": "cpu", "triple": "x86_64-unknown-linux-gnu", "cpu": "skylake",
                   "cpu_features": ["+avx2"], "cuda_archs": []},
        "entry": {
            "name": "main",
            "parameters": [
                {"name": "x", "index": 0, "dtype": "f32", "shape": [4, 3], "layout": [1, 0]},
                {"name": "y", "index": 1, "dtype": "bf16", "shape": [], "layout": []},
            ],
            "results": [
                {"index": 0, "shape_index": [0], "dtype": "f32", "shape": [4, 3], "layout": [1, 0]},
                {"index": 1, "shape_index": [1], "dtype": "s32", "shape": [2], "layout": None},
            ],
            "result_is_tuple": True,
        },
        "compiler": {"version": "0.1.0", "flags": ["--target", "cpu", "-O2"],
                     "passes": ["call-inliner", "dce"], "opt_level": 2},
        "input": {"sha256": hashlib.sha256(b"model").hexdigest(), "form": "HloModuleProto",
                  "module_name": "jit_f"},
        "memory": {"temp_bytes": 64, "argument_bytes": 50, "output_bytes": 56,
                   "constant_bytes": 0},
        "notes": ["made by a test"],
    }


MEMBERS = {
    "module.pb": bytes(range(256)) * 3,
    "module.hlo": b"HloModule jit_f\n",
    "code/cpu.o": b"\x7fELF" + bytes(100),
    "kernels.sm_90.cubin": b"cubin",
}


def test_round_trip(tmp_path):
    path = tmp_path / "m.bundle"
    stored = write_bundle(path, manifest=make_manifest(), members=MEMBERS)
    bundle = read_bundle(path, expected_target="cpu")
    assert bundle.format_version == FORMAT_VERSION
    assert bundle.manifest == stored
    assert dict(bundle.members) == MEMBERS
    assert bytes(bundle.members.view("module.pb")) == MEMBERS["module.pb"]
    assert bundle.module_proto == MEMBERS["module.pb"]
    for name, data in MEMBERS.items():
        entry = stored["members"][name]
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    assert stored["format_version"] == "1.1"
    assert set(stored) - {"members", "format_version"} == set(make_manifest())


def test_writer_does_not_mutate_the_callers_manifest(tmp_path):
    manifest = make_manifest()
    before = copy.deepcopy(manifest)
    write_bundle(tmp_path / "m.bundle", manifest=manifest, members=MEMBERS)
    assert manifest == before


def test_identical_inputs_give_identical_bytes(tmp_path):
    a, b = tmp_path / "a.bundle", tmp_path / "sub" / "b.bundle"
    b.parent.mkdir()
    write_bundle(a, manifest=make_manifest(), members=MEMBERS)
    # Same content in another order, another directory, members streamed in chunks.
    reordered = {k: MEMBERS[k] for k in reversed(list(MEMBERS))}
    reordered["module.pb"] = iter([MEMBERS["module.pb"][:100], MEMBERS["module.pb"][100:]])
    write_bundle(b, manifest=make_manifest(), members=reordered)
    assert a.read_bytes() == b.read_bytes()
    changed = make_manifest()
    changed["notes"] = ["different"]
    write_bundle(b, manifest=changed, members=MEMBERS)
    assert a.read_bytes() != b.read_bytes()


# sha256 of the bundle make_manifest() and MEMBERS give: pins the exact bytes of format 1.1
# (header, zip metadata, member order, canonical JSON). Change only with FORMAT_VERSION.
GOLDEN_DIGEST = "5d384377ba0a68b3fc8c4519a30cc92d4a5782fd18915a36280ef61768a19667"


def test_golden_digest(tmp_path):
    path = tmp_path / "g.bundle"
    write_bundle(path, manifest=make_manifest(), members=MEMBERS)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == GOLDEN_DIGEST, digest


def test_header_fields(tmp_path):
    path = tmp_path / "m.bundle"
    write_bundle(path, manifest=make_manifest(), members=MEMBERS)
    data = path.read_bytes()
    assert data[:8] == MAGIC
    header = Header.unpack(data)
    assert (header.major, header.minor) == FORMAT_VERSION
    assert header.header_length == HEADER_SIZE
    assert header.file_length == len(data)
    manifest_bytes = data[header.manifest_offset:header.manifest_offset + header.manifest_length]
    assert json.loads(manifest_bytes) == read_bundle(path).manifest
    assert manifest_bytes == canonical_json(json.loads(manifest_bytes))
    # The digest is sha256 of the image with the digest field zeroed (checked independently).
    zeroed = data[:40] + bytes(32) + data[72:]
    assert header.digest == hashlib.sha256(zeroed).digest()


def test_zip_is_inspectable_with_zipfile(tmp_path):
    path = tmp_path / "m.bundle"
    write_bundle(path, manifest=make_manifest(), members=MEMBERS)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        assert names == sorted(MEMBERS) + ["manifest.json"]
        for name, data in MEMBERS.items():
            assert zf.read(name) == data
        for info in zf.infolist():
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.compress_type == zipfile.ZIP_STORED
            assert (info.external_attr >> 16) & 0o777 == 0o644


@pytest.mark.skipif(shutil.which("unzip") is None, reason="unzip is not installed")
def test_zip_is_inspectable_with_unzip(tmp_path):
    path = tmp_path / "m.bundle"
    write_bundle(path, manifest=make_manifest(), members=MEMBERS)
    listing = subprocess.run(["unzip", "-l", str(path)], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    assert "extra bytes" not in listing.stdout + listing.stderr
    for name in [*MEMBERS, "manifest.json"]:
        assert name in listing.stdout
    tested = subprocess.run(["unzip", "-t", str(path)], capture_output=True, text=True)
    assert tested.returncode == 0 and "No errors detected" in tested.stdout
    printed = subprocess.run(["unzip", "-p", str(path), "module.hlo"], capture_output=True)
    assert printed.stdout == MEMBERS["module.hlo"]


def _failing_member():
    yield b"partial data"
    raise RuntimeError("codegen exploded")


def test_atomic_write_leaves_target_untouched(tmp_path):
    path = tmp_path / "m.bundle"
    path.write_bytes(b"previous contents")
    members = dict(MEMBERS, **{"code/zz.o": _failing_member()})
    with pytest.raises(RuntimeError, match="codegen exploded"):
        write_bundle(path, manifest=make_manifest(), members=members)
    assert path.read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.bundle"]


def test_atomic_write_with_no_previous_file(tmp_path):
    path = tmp_path / "m.bundle"
    bad = make_manifest()
    bad["target"]["kind"] = "tpu"
    with pytest.raises(ValueError, match="manifest.target.kind"):
        write_bundle(path, manifest=bad, members=MEMBERS)
    assert list(tmp_path.iterdir()) == []


def test_write_into_missing_directory_is_input_error(tmp_path):
    from hloc.errors import InputError

    with pytest.raises(InputError, match="cannot write bundle"):
        write_bundle(tmp_path / "nope" / "m.bundle", manifest=make_manifest(), members=MEMBERS)


@pytest.mark.parametrize("members,fragment", [
    ({"code/cpu.o": b"x"}, "needs member"),
    (dict(MEMBERS, **{"manifest.json": b"{}"}), "written by write_bundle"),
    (dict(MEMBERS, **{"../evil": b"x"}), "not a relative path"),
    (dict(MEMBERS, **{"/abs/path": b"x"}), "not a relative path"),
    (dict(MEMBERS, **{"a//b": b"x"}), "not a relative path"),
    (dict(MEMBERS, **{"a/./b": b"x"}), "not a relative path"),
    (dict(MEMBERS, **{"a\\b": b"x"}), "not a relative path"),
])
def test_writer_rejects_bad_members(tmp_path, members, fragment):
    with pytest.raises(ValueError, match=fragment):
        write_bundle(tmp_path / "m.bundle", manifest=make_manifest(), members=members)
    assert list(tmp_path.iterdir()) == []


def test_writer_rejects_unknown_manifest_keys(tmp_path):
    manifest = make_manifest()
    manifest["timestamp"] = "2024-01-01"
    with pytest.raises(ValueError, match="unknown key 'timestamp'"):
        write_bundle(tmp_path / "m.bundle", manifest=manifest, members=MEMBERS)


def test_empty_member_and_minimal_manifest(tmp_path):
    manifest = make_manifest()
    del manifest["memory"], manifest["notes"], manifest["target"]["triple"]
    path = tmp_path / "m.bundle"
    write_bundle(path, manifest=manifest, members={"module.pb": b"", "empty.txt": iter([])})
    bundle = read_bundle(path)
    assert bundle.members["module.pb"] == b"" and bundle.members["empty.txt"] == b""
    assert "memory" not in bundle.manifest


# ---- schema -----------------------------------------------------------------------------------


def test_schema_copies_are_identical():
    assert SCHEMA.read_bytes() == PACKAGED_SCHEMA.read_bytes()


def test_packaged_schema_path_resolves():
    from hloc.bundle import schema_path

    assert schema_path().read_bytes() == SCHEMA.read_bytes()


def test_schema_dtype_enum_matches_ir():
    from hloc.bundle.manifest import DTYPE_NAMES
    from hloc.ir import dtypes

    schema = json.loads(SCHEMA.read_text())
    assert schema["$defs"]["dtype"]["enum"] == list(DTYPE_NAMES)
    assert DTYPE_NAMES == tuple(d.name for d in dtypes._TABLE if d.np_dtype is not None)


def _stored_manifest(tmp_path) -> dict:
    path = tmp_path / "m.bundle"
    return write_bundle(path, manifest=make_manifest(), members=MEMBERS)


def _mutations():
    """(description, mutate) pairs; each gives a manifest the schema must judge."""
    def set_(path, value):
        def mutate(m):
            node = m
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        return mutate

    def drop(path):
        def mutate(m):
            node = m
            for key in path[:-1]:
                node = node[key]
            del node[path[-1]]
        return mutate

    return [
        ("valid", lambda m: None),
        ("no memory", drop(["memory"])),
        ("no notes", drop(["notes"])),
        ("no opt_level", drop(["compiler", "opt_level"])),
        ("null opt_level", set_(["compiler", "opt_level"], None)),
        ("no target kind", drop(["target", "kind"])),
        ("bad target kind", set_(["target", "kind"], "tpu")),
        ("bad cuda arch", set_(["target", "cuda_archs"], ["90"])),
        ("good cuda arch", set_(["target", "cuda_archs"], ["sm_90a", "sm_80"])),
        ("format 2.0", set_(["format_version"], "2.0")),
        ("format 1.7", set_(["format_version"], "1.7")),
        ("empty hloc_version", set_(["hloc_version"], "")),
        ("dtype", set_(["entry", "parameters", 0, "dtype"], "f33")),
        ("negative dim", set_(["entry", "parameters", 0, "shape"], [4, -1])),
        ("float dim", set_(["entry", "parameters", 0, "shape"], [4, 2.5])),
        ("bool dim", set_(["entry", "parameters", 0, "shape"], [True])),
        ("string layout", set_(["entry", "parameters", 0, "layout"], "1,0")),
        ("no param name", drop(["entry", "parameters", 0, "name"])),
        ("no result layout", drop(["entry", "results", 0, "layout"])),
        ("result_is_tuple str", set_(["entry", "result_is_tuple"], "yes")),
        ("flags not list", set_(["compiler", "flags"], "-O2")),
        ("opt level 4", set_(["compiler", "opt_level"], 4)),
        ("bad input sha", set_(["input", "sha256"], "ABC")),
        ("bad form", set_(["input", "form"], "onnx")),
        ("member bad sha", set_(["members", "module.pb", "sha256"], "0" * 63)),
        ("member neg size", set_(["members", "module.pb", "size"], -1)),
        ("member bad name", set_(["members", "../x"], {"sha256": "0" * 64, "size": 0})),
        ("member extra key", set_(["members", "module.pb", "crc"], 1)),
        ("memory missing key", drop(["memory", "temp_bytes"])),
        ("memory negative", set_(["memory", "temp_bytes"], -5)),
        ("notes not strings", set_(["notes"], [1])),
        ("unknown top key", set_(["timestamp"], "now")),
        ("unknown target key", set_(["target", "host"], "x")),
        ("members not object", set_(["members"], [])),
        ("manifest not object", None),
    ]


@pytest.mark.parametrize("description,mutate", _mutations(), ids=[d for d, _ in _mutations()])
def test_checker_agrees_with_json_schema(tmp_path, description, mutate):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    manifest = _stored_manifest(tmp_path)
    if mutate is None:
        manifest = ["not", "an", "object"]
    else:
        mutate(manifest)
    schema_ok = jsonschema.Draft202012Validator(schema).is_valid(manifest)
    checker_ok = manifest_problem(manifest, strict=True) is None
    assert schema_ok == checker_ok, (description, manifest_problem(manifest, strict=True))
    assert description.startswith(("valid", "no memory", "no notes", "no opt", "null opt",
                                   "good", "format 1.7")) == schema_ok


def test_lenient_checker_ignores_unknown_keys(tmp_path):
    manifest = _stored_manifest(tmp_path)
    manifest["added_in_1_1"] = {"anything": 1}
    manifest["target"]["new_field"] = True
    assert manifest_problem(manifest) is None
    assert "unknown key" in manifest_problem(manifest, strict=True)


@pytest.mark.parametrize("mutate,fragment", [
    (lambda e: e["parameters"][1].update(index=5), "entry.parameters[1].index: is 5, expected 1"),
    (lambda e: e["results"][0].update(index=1), "entry.results[0].index"),
    (lambda e: e.update(result_is_tuple=False), "exactly one entry"),
])
def test_checker_semantic_rules(tmp_path, mutate, fragment):
    manifest = _stored_manifest(tmp_path)
    mutate(manifest["entry"])
    assert fragment in manifest_problem(manifest)


# ---- entry section from the IR ----------------------------------------------------------------


def test_entry_section_from_module():
    m = Module("m")
    comp = Computation("main")
    a = comp.create(Opcode.PARAMETER, Shape.array("f32", [2, 3]), name="a",
                    attrs=Attrs(parameter_number=0))
    b = comp.create(Opcode.PARAMETER, Shape.array("bf16", [3]), name="b",
                    attrs=Attrs(parameter_number=1))
    out_shape = Shape.tuple_of([Shape.array("f32", [2, 3]),
                                Shape.tuple_of([Shape.array("bf16", [3])])])
    comp.root = comp.create(Opcode.TUPLE, out_shape, [a, b], name="t")
    m.add_computation(comp, entry=True)
    entry = entry_section(m)
    assert entry["name"] == "main" and entry["result_is_tuple"] is True
    assert [(p["name"], p["index"], p["dtype"], p["shape"], p["layout"])
            for p in entry["parameters"]] == [("a", 0, "f32", [2, 3], [1, 0]),
                                              ("b", 1, "bf16", [3], [0])]
    assert [(r["index"], r["shape_index"], r["dtype"], r["shape"]) for r in entry["results"]] == [
        (0, [0], "f32", [2, 3]), (1, [1, 0], "bf16", [3])]
    manifest = make_manifest()
    manifest["entry"] = entry
    manifest.update(format_version="1.0", members={})
    assert manifest_problem(manifest, strict=True) is None


def test_entry_section_rejects_tuple_parameters():
    m = Module("m")
    comp = Computation("main")
    shape = Shape.tuple_of([Shape.array("f32", [2])])
    comp.root = comp.create(Opcode.PARAMETER, shape, name="p", attrs=Attrs(parameter_number=0))
    m.add_computation(comp, entry=True)
    with pytest.raises(UnsupportedError, match="non-array shape"):
        entry_section(m)


def test_input_forms_match_the_frontend():
    from hloc.bundle import INPUT_FORMS
    from hloc.frontend.load import FORMS

    assert tuple(INPUT_FORMS) == tuple(FORMS)
