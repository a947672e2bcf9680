"""select-and-scatter as a native CPU kernel against the reference interpreter (and XLA's
outputs in samples/): overlapping and disjoint windows, padding, strides, ties, NaN, several
element types, and split unit ranges (units must own disjoint output slabs)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import SAMPLES, sample_arrays, sample_names

from .support.bundles import kernels_json, load_cpu, sample_bundle
from .support.kernels import check_hlo
from .support.run import compare_with_interpreter
from .support.values import assert_matches

pytestmark = pytest.mark.cpu

_SELECT = {"ge": "GE", "le": "LE", "gt": "GT"}


def _module(t: str, operand: str, source: str, window: str, select: str = "ge",
            scatter: str = "add", layout: str = "") -> str:
    return f"""HloModule sas
sel {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = pred[] compare(a, b), direction={_SELECT[select]}
}}
sct {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = {t}[] {scatter}(a, b)
}}
ENTRY e {{
  x = {t}[{operand}]{layout} parameter(0)
  s = {t}[{source}]{layout} parameter(1)
  i = {t}[] parameter(2)
  ROOT r = {t}[{operand}]{layout} select-and-scatter(x, s, i), window={{{window}}}, select=sel, scatter=sct
}}
"""


def _args(t: str, operand, source, rng, *, ties: bool = False, nan: bool = False):
    dt = {"f32": np.float32, "s32": np.int32, "f64": np.float64}.get(t)
    if t == "bf16":
        import ml_dtypes
        dt = ml_dtypes.bfloat16
    if ties or t == "s32":
        x = rng.integers(-2, 3, size=operand).astype(dt)  # many equal maxima per window
    else:
        x = rng.standard_normal(operand).astype(dt)
    if nan:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, flat.size // 5, replace=False)] = np.nan
    src = (rng.integers(-4, 5, size=source) if t == "s32"
           else rng.standard_normal(source)).astype(dt)
    return [x, src, np.asarray(1 if t == "s32" else 0.5, dt)]


CASES = [
    # (operand, source, window): overlapping 3x3/2 windows (pooling gradient) ...
    ("2,9,11,2", "2,4,5,2", "size=1x3x3x1 stride=1x2x2x1"),
    # ... with padding (a window may be mostly padding) ...
    ("2,8,10,2", "2,4,5,2", "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0"),
    # ... disjoint 2x2/2 windows, and uneven padding with stride 1 (heavy overlap) ...
    ("2,8,10,3", "2,4,5,3", "size=1x2x2x1 stride=1x2x2x1"),
    ("3,7,5", "3,8,5", "size=1x3x2 pad=0_0x2_1x1_0"),
    # ... 1-D, a window spanning every dimension (one serial unit), and a rank-0 operand.
    ("11", "5", "size=3 stride=2"),
    ("4,6", "2,3", "size=3x2 stride=1x2"),
    ("", "", ""),
]


def _ids(case):
    return case[2].replace(" ", "_") or "rank0"


@pytest.mark.parametrize("operand,source,window", CASES, ids=[_ids(c) for c in CASES])
@pytest.mark.parametrize("t", ["f32", "bf16", "s32"])
def test_kernel_matches_interpreter(t, operand, source, window):
    rng = np.random.default_rng(7)
    dims = [int(d) for d in operand.split(",") if d]
    sdims = [int(d) for d in source.split(",") if d]
    text = _module(t, operand, source, window)
    # chunks=3: units run as separate ranges, so colliding units would show.
    check_hlo(text, _args(t, dims, sdims, rng, ties=True), chunks=3)


@pytest.mark.parametrize("select", ["ge", "le", "gt"])
def test_ties_and_nan_follow_the_interpreter(select):
    rng = np.random.default_rng(3)
    text = _module("f32", "2,9,11,2", "2,4,5,2", "size=1x3x3x1 stride=1x2x2x1", select=select)
    check_hlo(text, _args("f32", [2, 9, 11, 2], [2, 4, 5, 2], rng, ties=True, nan=True))
    check_hlo(text, _args("f32", [2, 9, 11, 2], [2, 4, 5, 2], rng, nan=True), chunks=4)


def test_other_scatter_and_layout():
    rng = np.random.default_rng(5)
    text = _module("f32", "2,9,11,2", "2,4,5,2", "size=1x3x3x1 stride=1x2x2x1",
                   scatter="multiply", layout="{1,3,2,0}")
    check_hlo(text, _args("f32", [2, 9, 11, 2], [2, 4, 5, 2], rng), rtol=1e-6)


def test_whole_pipeline_runs_natively(tmp_path):
    rng = np.random.default_rng(11)
    text = _module("f32", "2,9,11,2", "2,4,5,2", "size=1x3x3x1 stride=1x2x2x1")
    args = _args("f32", [2, 9, 11, 2], [2, 4, 5, 2], rng)
    (outcome,) = compare_with_interpreter({"case": (text, args)}, tmp=tmp_path, rtol=1e-6,
                                          atol=1e-7).values()
    meta = kernels_json(outcome.artifact)
    assert not meta["fallbacks"], meta["fallbacks"]
    assert any("select-and-scatter" in k["segments"] for k in meta["kernels"].values())


def _samples_with(op: str) -> list[str]:
    names = sample_names() + sample_names("ops")
    return [n for n in names if (SAMPLES / f"{n}.hlo").exists()
            and f" {op}(" in (SAMPLES / f"{n}.hlo").read_text()]


@pytest.mark.parametrize("suffix", [".pb", ".opt.pb"])
@pytest.mark.parametrize("name", _samples_with("select-and-scatter"))
def test_samples_match_xla_without_host_fallback(name, suffix, tmp_path):
    bundle = sample_bundle(SAMPLES / f"{name}{suffix}", tmp_path / "s.bundle")
    fallbacks = kernels_json(bundle)["fallbacks"]
    assert not [f for f in fallbacks.values() if f["opcode"] == "select-and-scatter"], fallbacks
    got = load_cpu(bundle).run(sample_arrays(name, "inputs"))
    for g, w in zip(got, sample_arrays(name, "expected"), strict=True):
        assert_matches(g, w, rtol=2e-5, atol=2e-6, what=name)
