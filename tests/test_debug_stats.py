"""Benchmark statistics and the --baseline verdict, on synthetic reports (no timing)."""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

from hloc.cli.run import cli as run_cli
from hloc.debug.stats import compare, mann_whitney_p, percentile, summarize


def test_summarize_has_percentiles_cv_and_raw_times():
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s["median_s"] == 3.0 and s["p10_s"] == pytest.approx(1.4) and s["p90_s"] == pytest.approx(4.6)
    assert s["cv"] == pytest.approx(1.5811388 / 3.0) and s["times_s"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert percentile([7.0], 90) == 7.0


def test_mann_whitney():
    assert mann_whitney_p([1, 2, 3, 4, 5, 6], [11, 12, 13, 14, 15, 16]) < 0.01
    assert mann_whitney_p([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert mann_whitney_p([5, 5, 5], [5, 5, 5]) == 1.0


def _noisy(median: float, n: int = 30, spread: float = 0.02, seed: int = 0) -> dict:
    rng = random.Random(seed)
    return summarize([median * (1 + rng.uniform(-spread, spread)) for _ in range(n)])


def test_verdicts_with_samples():
    base = _noisy(1e-3)
    assert compare(_noisy(1.2e-3, seed=1), base, 5.0)["verdict"] == "regression"
    assert compare(_noisy(1.03e-3, seed=1), base, 5.0)["verdict"] == "slower (within limit)"
    assert compare(_noisy(0.8e-3, seed=1), base, 5.0)["verdict"] == "faster"
    same = compare(_noisy(1e-3, seed=1), base, 5.0)
    assert same["verdict"] == "no significant change" and same["test"] == "mann-whitney-u"
    # A 20% slower median inside 50% noise is not significant.
    noisy = compare(_noisy(1.2e-3, n=4, spread=0.5, seed=3), _noisy(1e-3, n=4, spread=0.5, seed=4), 5.0)
    assert noisy["verdict"] == "no significant change"


def test_old_baseline_without_samples_uses_noise_band():
    old = {"n": 10, "median_s": 1e-3, "min_s": 1e-3, "mean_s": 1e-3, "max_s": 1e-3}
    v = compare(_noisy(1.2e-3), old, 5.0)
    assert v["test"].startswith("noise band") and v["verdict"] == "regression" and v["p_value"] is None
    assert compare(_noisy(1.01e-3), old, 5.0)["verdict"] == "no significant change"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from hloc.cli.main import cli as hloc_cli

    d = tmp_path_factory.mktemp("b")
    (d / "m.hlo").write_text("HloModule m\n\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(x)\n}\n")
    r = CliRunner().invoke(hloc_cli, ["compile", str(d / "m.hlo"), "-o", str(d / "m.bundle"), "--target", "interpreter"])
    assert r.exit_code == 0, r.output
    return d / "m.bundle"


def hlo_run(*args):
    return CliRunner().invoke(run_cli, [str(a) for a in args], catch_exceptions=False)


def test_cli_baseline_gate(bundle, tmp_path):
    # Synthetic baselines far from any real time: 1000 s per run (we are faster) and 1 ns (slower).
    slow, fast = tmp_path / "slow.json", tmp_path / "fast.json"
    slow.write_text(json.dumps({"benchmark": summarize([1000.0, 1001.0, 1002.0])}))
    fast.write_text(json.dumps({"benchmark": summarize([1e-9, 1.1e-9, 1.2e-9])}))
    report = tmp_path / "r.json"
    r = hlo_run(bundle, "--zero-inputs", "--benchmark", 5, "--baseline", slow, "--report", report)
    assert r.exit_code == 0 and "faster" in r.output, r.output
    rep = json.loads(report.read_text())
    assert {"p10_s", "p90_s", "cv", "times_s"} <= set(rep["benchmark"]) and len(rep["benchmark"]["times_s"]) == 5
    assert rep["baseline"]["verdict"] == "faster"
    r = hlo_run(bundle, "--zero-inputs", "--benchmark", 5, "--baseline", fast, "--max-regression", 10)
    assert r.exit_code == 1 and "regression" in r.output


@pytest.mark.parametrize("content, fragment", [("{}", "no benchmark in this report"), ("nope", "not valid JSON")])
def test_cli_bad_baseline_exit_2(bundle, tmp_path, content, fragment):
    path = tmp_path / "b.json"
    path.write_text(content)
    r = hlo_run(bundle, "--zero-inputs", "--benchmark", 2, "--baseline", path)
    assert r.exit_code == 2 and fragment in r.output and "Traceback" not in r.output
    assert hlo_run(bundle, "--zero-inputs", "--baseline", path).exit_code == 2
