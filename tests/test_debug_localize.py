"""Issue 15 part 2: thunk_list, --localize, --perturb, --trace and `hloc extract`.

One small module (tests/data/thunk_zoo.hlo) holds every thunk kind the CPU runtime has: kernels
(single ops and a fusion), gemm, convolution, copy, memset, sort, fft, a custom-call run by the
host fallback, a while loop (condition and body thunks) and a conditional (both branches).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hloc.cli.main import cli as hloc_cli
from hloc.cli.run import cli as run_cli

ZOO = Path(__file__).parent / "data" / "thunk_zoo.hlo"
SHAPES = [(4, 8), (8, 3), (1, 6, 6, 2), (3, 3, 2, 4), (16,), (8,), (4,), (), (3, 5)]


def _invoke(cli, *args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo")
    r = _invoke(hloc_cli, "compile", ZOO, "-o", d / "zoo.bundle")
    assert r.exit_code == 0, r.output
    rng = np.random.default_rng(0)
    for pred in (True, False):
        arrays = {f"arg{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(SHAPES)}
        arrays["arg7"] = np.array(pred)
        np.savez(d / f"in_{pred}.npz", **arrays)
    return d


@pytest.fixture(scope="module")
def target(zoo):
    from hloc.debug.probe import instrument
    from hloc.runtime import load

    return instrument(load(str(zoo / "zoo.bundle")))


def _args(zoo, pred: bool) -> list[np.ndarray]:
    with np.load(zoo / f"in_{pred}.npz") as z:
        return [z[f"arg{i}"] for i in range(len(SHAPES))]


def _localize(target, args, perturb=None):
    from hloc.debug.localize import Localizer
    from hloc.debug.perturb import Perturber

    loc = Localizer(target)
    probes = [loc] + ([Perturber(target, perturb)] if perturb else [])
    target.run(args, probes)
    return loc


def test_thunk_list_matches_thunks_txt(zoo):
    r = _invoke(hloc_cli, "inspect", zoo / "zoo.bundle", "--json", "--extract", zoo / "x")
    listed = json.loads(r.stdout)["thunk_list"]
    lines = [m for m in re.finditer(r"^( +)([\w-]+) %(\S+)(.*)$",
                                    (zoo / "x" / "thunks.txt").read_text(), re.M)]
    assert [(t["kind"], t["name"]) for t in listed] == [(m[2], m[3]) for m in lines]
    assert [t["index"] for t in listed] == list(range(len(listed)))
    for t, m in zip(listed, lines, strict=True):
        written = re.search(r"outputs=\(([^)]*)\)|output=(\S+)|destination=(\S+)", m[4])
        text = "".join(g or "" for g in written.groups()) if written else ""
        slices = re.findall(r"a(\d+)\[(\d+):(\d+)\]", text)
        assert [(o["allocation"], o["offset"], o["offset"] + o["size"]) for o in t["outputs"]] == \
            [tuple(int(x) for x in s) for s in slices], t["name"]
    by_name = {t["name"]: t for t in listed}
    assert by_name["fusion"]["parent"] == "loop" and by_name["fusion"]["region"] == "body"
    assert by_name["p"]["region"] == "condition" and by_name["y.1"]["region"] == "branch 1"
    assert by_name["fusion"]["hlo"][0] == "fusion:fusion" and "multiply" in \
        {op.split(":")[1] for op in by_name["fusion"]["hlo"]}
    assert by_name["srt"]["hlo"] == ["srt:sort"] and by_name["loop"]["depth"] == 0


@pytest.mark.parametrize("pred", [True, False])
def test_no_divergence_unperturbed(target, zoo, pred):
    loc = _localize(target, _args(zoo, pred))
    assert loc.divergent is None and loc.checked >= 14


# Every leaf thunk, with the branch input that runs it (None: either).
PERTURBED = {"top": None, "copy.1": None, "copy": None, "p": None, "i1": None, "fusion": None,
             "y": True, "y.1": False, "cv": None, "d": None, "z": None, "f": None, "srt": None}


def test_zoo_has_every_cpu_thunk_kind(target):
    kinds = {str(target.by_name[n].kind) for n in PERTURBED} | {"while", "conditional"}
    assert kinds == {"kernel", "gemm", "convolution", "copy", "memset", "sort", "fft",
                     "custom-call", "while", "conditional"}
    assert set(PERTURBED) == {n for n, t in target.by_name.items() if not t.nested()}


@pytest.mark.parametrize("name", sorted(PERTURBED))
def test_perturbed_thunk_is_found(target, zoo, name):
    pred = PERTURBED[name]
    loc = _localize(target, _args(zoo, True if pred is None else pred), perturb=name)
    d = loc.divergent
    assert d is not None and d["thunk"] == name, d
    assert d["index"] == target.index_of[name] and d["iteration"] == 0
    assert d["max_abs_err"] > 0 and d["hlo"]
    if name in ("p", "i1", "fusion"):
        assert d["path"] == "loop[0]"


def test_localize_cli_report_and_exit_codes(zoo, tmp_path):
    bundle, inputs, report = zoo / "zoo.bundle", zoo / "in_True.npz", tmp_path / "r.json"
    r = _invoke(run_cli, bundle, "--inputs", inputs, "--localize", "--report", report)
    assert r.exit_code == 0 and "no thunk diverges" in r.output, r.output
    assert json.loads(report.read_text())["localize"]["first_divergent"] is None
    r = _invoke(run_cli, bundle, "--inputs", inputs, "--localize", "--perturb", "cv=0.5", "--report", report)
    assert r.exit_code == 1 and "first divergent thunk: cv (kind convolution" in r.output, r.output
    d = json.loads(report.read_text())["localize"]["first_divergent"]
    assert {"thunk", "index", "hlo", "max_abs_err", "max_rel_err", "max_ulp_err"} <= set(d)
    assert d["thunk"] == "cv" and d["max_rel_err"] >= 0.4 and d["max_ulp_err"] > 1000
    r = _invoke(run_cli, bundle, "--inputs", inputs, "--perturb", "fusoin")
    assert r.exit_code == 2 and "did you mean: fusion" in r.output


def test_perturb_changes_outputs(zoo, tmp_path):
    bundle, inputs = zoo / "zoo.bundle", zoo / "in_True.npz"
    _invoke(run_cli, bundle, "--inputs", inputs, "--output", tmp_path / "a.npz")
    r = _invoke(run_cli, bundle, "--inputs", inputs, "--perturb", "d=0.1", "--output", tmp_path / "b.npz")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "a.npz") as a, np.load(tmp_path / "b.npz") as b:
        np.testing.assert_allclose(b["out0"], a["out0"] * 1.1 + 0.1 * 1e-2 * max(np.abs(a["out0"]).max(), 1),
                                   rtol=1e-5)
        np.testing.assert_array_equal(a["out1"], b["out1"])


def test_trace_structure(zoo, tmp_path):
    trace = tmp_path / "t.json"
    r = _invoke(run_cli, zoo / "zoo.bundle", "--inputs", zoo / "in_False.npz", "--trace", trace)
    assert r.exit_code == 0, r.output
    events = json.loads(trace.read_text())["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    assert {e["name"] for e in meta} >= {"process_name", "thread_name"}
    slices = [e for e in events if e["ph"] == "X"]
    for e in slices:
        assert {"name", "cat", "ts", "dur", "pid", "tid", "args"} <= set(e) and e["dur"] >= 0
        assert {"hlo", "bytes", "GB/s"} <= set(e["args"])
    assert [e["ts"] for e in slices] == sorted(e["ts"] for e in slices)
    open_ends: list[float] = []  # a stack of enclosing slices' ends: nested or disjoint only
    for e in slices:
        while open_ends and e["ts"] >= open_ends[-1]:
            open_ends.pop()
        assert not open_ends or e["ts"] + e["dur"] <= open_ends[-1] + 1e-3, e["name"]
        open_ends.append(e["ts"] + e["dur"])
    names = [e["name"] for e in slices]
    assert names.count("fusion") == 3 and "y.1" in names and "y" not in names
    gemm = next(e for e in slices if e["name"] == "d")
    assert gemm["args"]["flops"] == 2 * 4 * 3 * 8 and "GFLOP/s" in gemm["args"]
    loop = next(e for e in slices if e["name"] == "loop")
    inner = [e for e in slices if e["name"] in ("i1", "fusion", "p")]
    assert all(loop["ts"] <= e["ts"] and e["ts"] + e["dur"] <= loop["ts"] + loop["dur"] + 1e-3 for e in inner)


def test_extract_round_trip(zoo, tmp_path):
    out = tmp_path / "srt"
    r = _invoke(hloc_cli, "extract", zoo / "zoo.bundle", "--thunk", "srt", "-o", out,
                "--inputs", zoo / "in_True.npz")
    assert r.exit_code == 0, r.output
    assert {p.name for p in out.iterdir()} == {"module.hlo", "inputs.npz", "expected.npz", "thunk.json"}
    with np.load(out / "inputs.npz") as z, np.load(zoo / "in_True.npz") as given:
        np.testing.assert_array_equal(z["arg0"], given["arg4"])
    with np.load(out / "expected.npz") as z:
        np.testing.assert_array_equal(z["out0"], np.sort(np.load(zoo / "in_True.npz")["arg4"]))
    r = _invoke(hloc_cli, "compile", out / "module.hlo", "-o", tmp_path / "srt.bundle")
    assert r.exit_code == 0, r.output
    r = _invoke(run_cli, tmp_path / "srt.bundle", "--inputs", out / "inputs.npz",
                "--expected", out / "expected.npz")
    assert r.exit_code == 0 and "OK: 1 of 1" in r.output, r.output
    r = _invoke(hloc_cli, "extract", zoo / "zoo.bundle", "--thunk", "loop", "-o", tmp_path / "l")
    assert r.exit_code == 2 and "no HLO computation of its own" in r.output


CUDA_HLO = """HloModule small

ENTRY main {
  a = f32[6,5] parameter(0)
  b = f32[5,4] parameter(1)
  d = f32[6,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[6,4] exponential(d)
  ROOT s = f32[6,4] add(e, d)
}
"""


def test_cuda_emulated_localize(tmp_path):
    from hloc.debug.probe import instrument
    from hloc.runtime import load

    (tmp_path / "m.hlo").write_text(CUDA_HLO)
    r = _invoke(hloc_cli, "compile", tmp_path / "m.hlo", "--target", "cuda", "-o", tmp_path / "m.bundle")
    assert r.exit_code == 0, r.output
    target = instrument(load(str(tmp_path / "m.bundle"), "cuda-emulated"))
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((6, 5)).astype(np.float32) * 0.3,
            rng.standard_normal((5, 4)).astype(np.float32) * 0.3]
    assert _localize(target, args).divergent is None
    leaves = [n for n, t in target.by_name.items() if not t.nested()]
    assert leaves
    for name in leaves:
        d = _localize(target, args, perturb=name).divergent
        assert d is not None and d["thunk"] == name, (name, d)
