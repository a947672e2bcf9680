"""CPU bundles with one object per partition of the LLVM module (kernels.json version 3):
they load, run, validate, refuse tampering, are byte-identical for any compile thread count,
and bundles of earlier hlocs (version 2, one cpu.o) still load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hloc.errors import InputError
from hloc.runtime import load
from tests.conftest import SAMPLES, sample_arrays, sample_meta
from tests.test_interp_samples import mismatch

from .trust_support import compile_text, members_of, repack, system_object

pytestmark = pytest.mark.cpu

ELEMENTWISE_HLO = """HloModule small

ENTRY main {
  a = f32[8] parameter(0)
  b = f32[8] parameter(1)
  s = f32[8] add(a, b)
  ROOT m = f32[8] multiply(s, a)
}
"""


@pytest.fixture(scope="module")
def mlp_bundle(tmp_path_factory):
    from hloc.compiler import compile

    out = tmp_path_factory.mktemp("mlp") / "mlp.bundle"
    compile(str(SAMPLES / "mlp.pb"), str(out))
    return out


@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory):
    return compile_text(tmp_path_factory.mktemp("small"), ELEMENTWISE_HLO, "small")


def _objects(path) -> list[str]:
    return [o["member"] for o in json.loads(members_of(path)[1]["kernels.json"])["objects"]]


def _refused(path, member: str, fragment: str) -> str:
    with pytest.raises(InputError) as info:
        load(str(path))
    text = str(info.value)
    assert "\n" not in text and f"member {member}" in text and fragment in text, text
    return text


def test_several_objects_load_and_match_xla(mlp_bundle):
    names = _objects(mlp_bundle)
    assert names == [f"cpu.{i}.o" for i in range(len(names))] and len(names) > 1
    got = load(str(mlp_bundle)).run(sample_arrays("mlp", "inputs"))
    meta = sample_meta("mlp")
    for g, e, d in zip(got, sample_arrays("mlp", "expected"), meta["outputs"], strict=True):
        assert mismatch(g, e, d) is None


def test_a_small_module_keeps_one_cpu_o(small_bundle):
    assert _objects(small_bundle) == ["cpu.o"]


def test_bundle_is_byte_identical_for_any_thread_count(tmp_path, monkeypatch):
    from hloc.compiler import compile

    images = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("HLOC_COMPILE_THREADS", threads)
        out = tmp_path / f"t{threads}.bundle"
        compile(str(SAMPLES / "mlp.pb"), str(out))
        images.append(out.read_bytes())
    assert images[0] == images[1] == images[2]


def test_bad_thread_count_is_one_line(monkeypatch, tmp_path):
    from hloc.compiler import compile

    monkeypatch.setenv("HLOC_COMPILE_THREADS", "two")
    with pytest.raises(InputError, match="HLOC_COMPILE_THREADS must be a positive integer"):
        compile(str(SAMPLES / "mlp.pb"), str(tmp_path / "x.bundle"))


def test_a_tampered_object_is_refused(tmp_path, mlp_bundle):
    members = members_of(mlp_bundle)[1]
    swapped = {"cpu.1.o": members["cpu.2.o"]}
    _refused(repack(mlp_bundle, tmp_path / "a.bundle", replace=swapped, bind=False),
             "cpu.1.o", "hash differs")
    # Re-hashed, the swap defines cpu.2.o's kernels twice (and cpu.1.o's nowhere).
    _refused(repack(mlp_bundle, tmp_path / "b.bundle", replace=swapped), "cpu.2.o",
             "which cpu.1.o defines too")


def test_the_object_importing_system_is_named(tmp_path, mlp_bundle):
    from hloc.codegen.cpu.compile import object_imports
    from hloc.codegen.target import host_target

    members = members_of(mlp_bundle)[1]
    members["cpu.3.o"] = system_object(f'target triple = "{host_target().triple}"\n')
    imports = object_imports([members[name] for name in _objects(mlp_bundle)])
    assert "system" in imports
    bad = repack(mlp_bundle, tmp_path / "evil.bundle", replace={"cpu.3.o": members["cpu.3.o"]},
                 edit_json={"kernels.json": lambda d: d.__setitem__("external_symbols",
                                                                    imports)})
    _refused(bad, "cpu.3.o", "imports system")


@pytest.mark.parametrize("edit,member,fragment", [
    (lambda d: d["objects"].append({"member": "cpu.9.o", "sha256": "0" * 64}), "cpu.9.o",
     "missing"),
    (lambda d: d["objects"].pop(), "cpu.", "does not list"),
    (lambda d: d["objects"].__setitem__(0, {"member": "module.pb", "sha256": ""}),
     "kernels.json", "named cpu.o or cpu.N.o"),
    (lambda d: d["objects"].append(dict(d["objects"][0])), "kernels.json", "distinct"),
    (lambda d: d.__setitem__("objects", []), "kernels.json", "lists 0 objects"),
    (lambda d: d.__setitem__("objects", [{"member": "cpu.o"}] * 65), "kernels.json",
     "lists 65 objects"),
    (lambda d: d.__setitem__("objects", "cpu.o"), "kernels.json", "objects is not a list"),
])
def test_kernels_json_object_list_tampering(tmp_path, mlp_bundle, edit, member, fragment):
    bad = repack(mlp_bundle, tmp_path / "b.bundle", edit_json={"kernels.json": edit})
    _refused(bad, member, fragment)


def _as_version_2(doc) -> None:
    """kernels.json as hloc wrote it before partitioned code generation."""
    assert [o["member"] for o in doc.pop("objects")] == ["cpu.o"]
    doc.update(version=2, object="cpu.o")  # object_sha256: repack's rebind


def test_version_2_bundles_still_load_and_run(tmp_path, small_bundle):
    old = repack(small_bundle, tmp_path / "v2.bundle", edit_json={"kernels.json": _as_version_2})
    assert json.loads(members_of(old)[1]["kernels.json"])["version"] == 2
    a = np.arange(8, dtype=np.float32)
    b = np.full(8, 0.5, dtype=np.float32)
    (got,) = load(str(old)).run([a, b])
    np.testing.assert_array_equal(got, (a + b) * a)


def test_version_2_bundles_are_still_checked(tmp_path, small_bundle, mlp_bundle):
    old = repack(small_bundle, tmp_path / "v2.bundle", edit_json={"kernels.json": _as_version_2})
    other = members_of(mlp_bundle)[1]["cpu.0.o"]
    _refused(repack(old, tmp_path / "bad.bundle", replace={"cpu.o": other}, bind=False),
             "cpu.o", "hash differs")
