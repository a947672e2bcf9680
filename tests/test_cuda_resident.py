"""Device-resident parameters, copy rows and the GPU benchmark figures, on `cuda-emulated`
(the same GpuRunner logic as on a GPU, with the emulator's arena as the device)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from hloc.buffers.assignment import Allocation, Slice
from hloc.bundle import read_bundle
from hloc.errors import InputError
from hloc.ir.text.parser import parse_module
from hloc.runtime.cuda.emulated import CudaEmulatedExecutable
from hloc.runtime.cuda.residency import eligible_parameters, parse_spec
from hloc.runtime.interpreter import evaluate
from hloc.thunks.gpu import Upload

from .support.bundles import compile_bundle
from .test_cli import hlo_run, one_line_error

DENSE = """HloModule dense

ENTRY e {
  x = f32[8,16] parameter(0)
  w = f32[16,32] parameter(1)
  b = f32[32] parameter(2)
  d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[8,32] broadcast(b), dimensions={1}
  s = f32[8,32] add(d, bb)
  n = f32[8,16] negate(x)
  ROOT r = (f32[8,32], f32[8,16]) tuple(s, n)
}
"""


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("resident") / "dense.bundle"
    compile_bundle(parse_module(DENSE), path, target="cuda")
    return str(path)


@pytest.fixture()
def exe(bundle_path):
    return CudaEmulatedExecutable(read_bundle(bundle_path))


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 32), (32,))]


def _want(args):
    return evaluate(parse_module(DENSE), args).flatten()


def _close(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _count_uploads(exe) -> list[list[int]]:
    """Record, per run, the parameter numbers whose leaves were uploaded."""
    calls: list[list[int]] = []
    number = {u.slice: u.number for u in exe.program.host_to_device if not u.constant}
    real = exe.memory.upload_arrays

    def upload(items):
        calls.append(sorted(number[s] for s, _, _ in items))
        real(items)

    exe.memory.upload_arrays = upload
    return calls


# ---- SPEC ---------------------------------------------------------------------------------------

@pytest.mark.pure
@pytest.mark.parametrize("spec,want", [
    ("all", set(range(6))), ("none", set()), ("0-2", {0, 1, 2}), ("0,3,5", {0, 3, 5}),
    ("0-1,4", {0, 1, 4}), ("all-but-last:2", {0, 1, 2, 3}), ("all-but-last:0", set(range(6))),
    (" 5 ", {5})])
def test_spec(spec, want):
    assert parse_spec(spec, 6) == frozenset(want)


@pytest.mark.pure
@pytest.mark.parametrize("spec,fragment", [
    ("0-6", "parameter 6 does not exist"), ("3-1", "backwards"), ("x", "expected all"),
    ("all-but-last:7", "only 6"), ("1,,2", "expected all"), ("-1", "expected all")])
def test_spec_errors(spec, fragment):
    with pytest.raises(InputError, match=fragment):
        parse_spec(spec, 6)


@pytest.mark.pure
def test_donated_parameters_are_not_eligible():
    allocs = (Allocation(0, 64, "parameter", 0), Allocation(1, 64, "parameter", 1,
                                                            aliased_with_output=True),
              Allocation(2, 64, "temp"))
    uploads = (Upload(Slice(0, 0, 64), 0), Upload(Slice(1, 0, 64), 1),
               Upload(Slice(2, 0, 64), 2), Upload(Slice(0, 0, 8), constant="c"))
    program = SimpleNamespace(allocations=allocs, host_to_device=uploads)
    assert eligible_parameters(program) == {0}


# ---- the runtime --------------------------------------------------------------------------------

@pytest.mark.cpu
def test_resident_results_identical_and_uploaded_once(exe):
    args = _inputs()
    plain = exe.run(args)
    calls = _count_uploads(exe)
    assert exe.set_resident({1, 2}) == {1, 2} and exe.resident == {1, 2}
    first, second = exe.run(args), exe.run(args)
    assert calls == [[0, 1, 2], [0]]
    for a, b, c in zip(plain, first, second, strict=True):
        assert a.tobytes() == b.tobytes() == c.tobytes()
    _close(second, _want(args))


@pytest.mark.cpu
def test_new_array_object_reuploads(exe):
    args = _inputs()
    exe.set_resident([0, 1, 2])
    calls = _count_uploads(exe)
    exe.run(args)
    fresh = [args[0], args[1] * 2, args[2]]
    _close(exe.run(fresh), _want(fresh))
    assert calls == [[0, 1, 2], [1]]


@pytest.mark.cpu
def test_in_place_change_needs_update(exe):
    args = _inputs()
    exe.set_resident([1])
    before = exe.run(args)
    args[1] += 1.0  # in place: the same object, so the device copy is kept...
    stale = exe.run(args)
    assert stale[0].tobytes() == before[0].tobytes()
    exe.update(1, args[1])  # ...until update() uploads it
    _close(exe.run(args), _want(args))
    with pytest.raises(InputError, match="not resident"):
        exe.update(0, args[0])


@pytest.mark.cpu
def test_set_resident_again_reuploads_and_checks_numbers(exe):
    args = _inputs()
    exe.set_resident([2])
    calls = _count_uploads(exe)
    exe.run(args)
    exe.set_resident([2])
    exe.run(args)
    assert calls == [[0, 1, 2], [0, 1, 2]]
    with pytest.raises(InputError, match="does not exist"):
        exe.set_resident([3])


@pytest.mark.cpu
def test_profile_has_copy_rows_with_bytes(exe):
    args = _inputs()
    exe.set_resident([1])
    exe.run(args)
    _, rows = exe.run_profiled(args)
    by_name = {r.name: r for r in rows}
    up, down = by_name["(uploads)"], by_name["(downloads)"]
    assert (up.kind, down.kind) == ("copy-h2d", "copy-d2h")
    assert up.bytes == 8 * 16 * 4 + 32 * 4  # x and b; w stays resident
    assert down.bytes == (8 * 32 + 8 * 16) * 4


@pytest.mark.cpu
def test_device_resident_timing(exe):
    args = _inputs()
    times = exe.time_device_resident(args, 3)
    assert len(times) == 3 and all(t >= 0 for t in times)
    _close(exe.run(args), _want(args))


# ---- hlo-run ------------------------------------------------------------------------------------

def _npz(tmp_path) -> str:
    path = tmp_path / "in.npz"
    np.savez(path, **{f"arg{i}": a for i, a in enumerate(_inputs())})
    return str(path)


@pytest.mark.cpu
def test_cli_benchmark_reports_both_gpu_figures(bundle_path, tmp_path):
    report = tmp_path / "r.json"
    r = hlo_run(bundle_path, "--device", "cuda-emulated", "--inputs", _npz(tmp_path),
                "--resident", "all-but-last:1", "--benchmark", "2", "--report", report)
    assert r.exit_code == 0, r.output
    bench = json.loads(report.read_text())["benchmark"]
    for key in ("device_resident", "host_to_host"):
        assert bench[key]["n"] == 2 and {"median_s", "min_s", "p90_s"} <= bench[key].keys()
    assert "device-resident:" in r.output and "host-to-host:" in r.output


@pytest.mark.cpu
def test_cli_profile_shows_copies(bundle_path, tmp_path):
    r = hlo_run(bundle_path, "--device", "cuda-emulated", "--inputs", _npz(tmp_path),
                "--resident", "1", "--profile")
    assert r.exit_code == 0, r.output
    rows = [ln for ln in r.output.splitlines() if ln.startswith("(")]
    assert any("copy-h2d" in ln and "GB/s" in ln and "MiB" in ln for ln in rows), r.output
    assert any("copy-d2h" in ln and "GB/s" in ln for ln in rows), r.output


@pytest.mark.cpu
def test_cli_resident_errors(bundle_path, tmp_path):
    inputs = _npz(tmp_path)
    one_line_error(hlo_run(bundle_path, "--device", "interpreter", "--inputs", inputs,
                           "--resident", "all"), 2, "--resident needs --device cuda")
    one_line_error(hlo_run(bundle_path, "--device", "cuda-emulated", "--inputs", inputs,
                           "--resident", "0-9"), 2, "parameter 9 does not exist")
