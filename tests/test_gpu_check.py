"""tools/gpu_check.py without a GPU: the plan it prints (tests, cases, models; --only), the
no-GPU exit, its table and geomean rows (made-up results), the resident specs of the models,
the pytest summary it extracts, the output comparison, the budget, the step timeout, and one
whole run on the emulator (hloc on cuda-emulated; XLA on CPU where jax is installed)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import gpu_check  # noqa: E402
import gpu_check_report as rep  # noqa: E402

pytestmark = pytest.mark.pure


def _dry_run(capsys, *args) -> list[str]:
    assert gpu_check.main(["--dry-run", *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_dry_run_lists_tests_every_case_and_every_model(capsys, tmp_path):
    lines = _dry_run(capsys, "--out", str(tmp_path))
    assert "-m gpu" in lines[0] and "pytest" in lines[0]
    cases, models = gpu_check.case_names(), gpu_check._weights().model_names()
    assert cases and {"resnet50", "lstm", "cnn_train_step"} <= set(models)
    assert len(lines) == 1 + 3 * (len(cases) + len(models))
    for name in cases + models:
        steps = [ln for ln in lines if f"/{name}.pb" in ln or f"/{name}.json" in ln]
        assert len(steps) == 3, name
        assert any(" compile " in s and "--arch sm_90" in s for s in steps)
        assert any(" hloc " in s for s in steps) and any(" xla " in s for s in steps)
    resnet = [ln for ln in lines if "resnet50.json" in ln]  # the README's --resident 1-320
    assert len(resnet) == 2 and all(ln.endswith("--resident 1-320") for ln in resnet)
    xla_resnet = [ln for ln in resnet if " xla " in ln][0]
    assert xla_resnet.split()[4].endswith("samples/models/resnet50.pb")  # lowered, not .opt


def test_only_and_k_select_parts(capsys, tmp_path):
    assert _dry_run(capsys, "--only", "tests") == [" ".join(gpu_check.pytest_command(
        gpu_check._xdist_workers()))]
    lines = _dry_run(capsys, "--only", "models", "-k", "lstm", "--arch", "sm_80")
    assert len(lines) == 3 and all("lstm" in ln for ln in lines) and "sm_80" in lines[0]
    lines = _dry_run(capsys, "--skip-tests", "-k", "matmul_1024")
    assert len(lines) == 3 and "pytest" not in lines[0]
    lines = _dry_run(capsys, "--only", "cases,models", "--emulated", "-k", "lstm")
    assert "--device cuda-emulated" in lines[1] and "--platform cpu" in lines[2]
    with pytest.raises(SystemExit):
        gpu_check.main(["--dry-run", "--only", "benchmarks"])


def test_no_gpu_prints_one_line_and_exits_3(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_check, "detect_gpu", lambda: None)
    assert gpu_check.main(["--out", str(tmp_path / "o")]) == gpu_check.NO_GPU
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no NVIDIA GPU" in out
    assert not (tmp_path / "o").exists()


def test_resident_specs_leave_out_the_data_inputs():
    assert gpu_check.ranges({0, 1, 2, 3, 7}) == "0-3,7"
    assert gpu_check.ranges([5]) == "5" and gpu_check.ranges([]) == ""
    params = [{"name": "x:ids"}, {"name": "x:mask"}, {"name": "w:a"}, {"name": "w:b"}]
    assert gpu_check.weight_spec(params) == "2-3"
    jobs = {j.name: j for j in gpu_check.model_jobs()}
    assert jobs["resnet50"].resident == "1-320" and jobs["bert_encoder"].resident == "3-86"
    assert jobs["lstm"].atol == gpu_check._weights().meta("lstm")["tolerance"]["atol"]


def _side(host, resident=None, **extra):
    side = {"host_ms": host, "runs": 10}
    return side | ({"resident_ms": resident} if resident is not None else {}) | extra


ROWS = [
    {"case": "matmul_1024", "kind": "case", "hloc": _side(3.0, 0.2), "xla": _side(2.0, 0.1),
     "match": "yes"},
    {"case": "mlp_b256", "kind": "case", "hloc": _side(1.0, 0.1), "xla": _side(2.0, 0.2),
     "match": "yes"},
    {"case": "scan_rnn_200", "kind": "case", "hloc": {"error": "compile timed out"}, "xla": {},
     "match": "-"},
    {"case": "models/resnet50", "kind": "model", "resident": "1-320",
     "hloc": _side(4.85, 4.53), "xla": _side(123.456, resident_error="XlaRuntimeError: x|y"),
     "match": "yes"},
    {"case": "models/lstm", "kind": "model", "hloc": {}, "xla": {}, "match": "-",
     "note": "skipped (budget)"},
]


def test_table_columns_ratios_and_notes():
    table = rep.format_table(ROWS).splitlines()
    assert table[0] == ("| case | hloc host→host ms | XLA host→host ms | ratio | hloc resident ms "
                        "| XLA resident ms | ratio | outputs match | notes |")
    assert table[1] == "|" + "---|" * 9
    assert table[2] == "| matmul_1024 | 3.000 | 2.000 | 1.50 | 0.200 | 0.100 | 2.00 | yes |  |"
    assert table[4] == ("| scan_rnn_200 | - | - | - | - | - | - | - "
                        "| hloc compile timed out |")
    assert table[5] == ("| models/resnet50 | 4.850 | 123.5 | 0.04 | 4.530 | - | - | yes "
                        "| host→host with 1-320 resident; xla resident XlaRuntimeError: x/y |")
    assert table[6].startswith("| models/lstm | - | - | - |") and "skipped (budget)" in table[6]


def test_geomean_rows_per_group_with_counts_above_limit():
    lines = rep.format_table(ROWS).splitlines()
    cases, models, every = lines[-3:]
    assert cases == ("| **geomean, cases** |  |  | 0.87 (1 of 2 > 1.3) |  |  "
                     "| 1.00 (1 of 2 > 1.3) |  |  |")
    host = (4.85 / 123.456)
    assert models.split(" | ")[3] == f"{host:.2f} (0 of 1 > 1.3)" and "| - |" in models
    assert every.split(" | ")[3] == f"{(1.5 * 0.5 * host) ** (1 / 3):.2f} (1 of 3 > 1.3)"
    only_cases = rep.format_table(ROWS[:2]).splitlines()
    assert only_cases[-1].startswith("| **geomean, cases**") and "models" not in only_cases[-2]
    summary = rep.geomeans(ROWS)
    assert summary["case/host_ms"] == {"geomean": pytest.approx(0.75 ** 0.5), "rows": 2,
                                       "above_limit": 1}
    assert summary["model/resident_ms"]["geomean"] is None
    assert rep.geomean([]) is None and rep.geomean([2.0, 8.0]) == pytest.approx(4.0)


def test_report_and_exit_verdict():
    text = rep.report(("NVIDIA H200", "sm_90"), "91 passed in 98s", ROWS, 281)
    assert "NVIDIA H200 (sm_90)" in text and "91 passed" in text and "281 s" in text
    assert "weights" in text and "serving" in text  # the caption says what host→host means
    assert rep.failed("91 passed", ROWS)  # scan_rnn_200 did not compile
    assert not rep.failed("91 passed", [r for r in ROWS if r["case"] != "scan_rnn_200"])
    assert rep.failed("71 passed, 5 failed", ROWS[:2])
    assert rep.failed("91 passed", [ROWS[0] | {"match": "no (vs expected.npz)"}])
    budget = {"case": "x", "hloc": {"error": "stopped after 3 s (budget)"}, "match": "-"}
    assert not rep.failed("91 passed", [budget])


def test_pytest_summary():
    log = "....\n=== 71 passed, 5 failed in 10.85s ===\n"
    assert gpu_check.pytest_summary(log, 1) == "71 passed, 5 failed in 10.85s"
    assert gpu_check.pytest_summary("...", 124) == "timed out"


def test_outputs_match(tmp_path):
    a = np.linspace(0, 1, 10, dtype=np.float32)
    np.savez(tmp_path / "hloc.npz", out0=a, out1=a)
    np.savez(tmp_path / "xla.npz", out0=a * (1 + 1e-6), out1=a)
    assert gpu_check.outputs_match(tmp_path, 2e-3, 2e-4) == "yes"
    np.savez(tmp_path / "xla.npz", out0=a, out1=a + 1e-2)
    assert gpu_check.outputs_match(tmp_path, 2e-3, 2e-4) == "no"
    assert gpu_check.outputs_match(tmp_path, 2e-3, 2e-2) == "yes"  # a model's wider atol
    (tmp_path / "xla.npz").unlink()
    assert gpu_check.outputs_match(tmp_path, 2e-3, 2e-4) == "-"
    np.savez(tmp_path / "expected.npz", out0=a, out1=a)
    assert gpu_check.outputs_match(tmp_path, 2e-3, 2e-4, tmp_path / "expected.npz") == \
        "yes (vs expected.npz)"
    (tmp_path / "hloc.npz").write_text("not an npz")
    assert gpu_check.outputs_match(tmp_path, 2e-3, 2e-4, tmp_path / "expected.npz") == "-"


def test_step_timeout_is_124():
    code, text = gpu_check.run_step([sys.executable, "-c", "import time; time.sleep(30)"], 1)
    assert code == 124 and "timed out" in text


def test_step_timeout_kills_what_the_step_started():
    """A grandchild holding the output pipe must not keep the check waiting."""
    start = time.monotonic()
    code, _ = gpu_check.run_step([sys.executable, "-c", "import subprocess; "
                                  "subprocess.run(['sleep', '30'])"], 1)
    assert code == 124 and time.monotonic() - start < 10


def test_budget_rows_and_the_models_share(monkeypatch, tmp_path):
    seen = {}

    def fake_bench(job, setup, deadline):
        seen[job.label] = deadline.left()
        return {"case": job.label, "kind": job.kind, "hloc": {}, "xla": {}, "match": "-"}

    monkeypatch.setattr(gpu_check, "bench_job", fake_bench)
    jobs = [gpu_check.Job("case", "a"), gpu_check.Job("case", "b"), gpu_check.Job("model", "m")]
    compiled = {"a": "", "b": "compile failed: x", "models/m": ""}
    setup = gpu_check.Setup(tmp_path)
    rows = gpu_check.bench_all(jobs, compiled, setup, gpu_check.Deadline(100), 100)
    assert seen["a"] == pytest.approx(100 - 100 * gpu_check.MODEL_SHARE, abs=1)
    assert seen["models/m"] == pytest.approx(100, abs=1)
    assert rows[1]["hloc"] == {"error": "compile failed: x"}
    seen.clear()
    rows = gpu_check.bench_all(jobs, compiled, setup, gpu_check.Deadline(30), 100)
    assert list(seen) == ["models/m"]  # 30 s left: the cases' part has run out
    assert rows[0]["note"] == "skipped (budget)" and "note" not in rows[2]
    rows = gpu_check.bench_all(jobs, compiled, setup, gpu_check.Deadline(1), 1)
    assert rows[2]["note"] == "skipped (budget)"


@pytest.mark.cpu
def test_whole_check_on_the_emulator(monkeypatch, tmp_path, capsys):
    """A small case and a small "model" (samples/mlp, weights resident but its input) through
    compile, both sides and the report: every cell filled or saying why."""
    cases, models = tmp_path / "cases", tmp_path / "models"
    cases.mkdir()
    models.mkdir()
    meta = json.loads((ROOT / "samples" / "mlp.json").read_text())
    for d in (cases, models):
        shutil.copy(ROOT / "samples" / "mlp.pb", d / "mlp.pb")
    (cases / "mlp.json").write_text(json.dumps(
        {"params": [{"dtype": "float32", "shape": p["shape"]} for p in meta["params"]]}))
    last = len(meta["params"]) - 1
    (models / "mlp.json").write_text(json.dumps({"seed": 3, "tolerance": {
        "rtol": 2e-3, "atol": 1e-4}, "params": [
        {"name": ("x:" if i == last else "w:") + str(i), "dtype": "f32", "shape": p["shape"],
         "init": {"dist": "normal", "mean": 0.0, "std": 0.1}}
        for i, p in enumerate(meta["params"])]}))
    shutil.copy(ROOT / "samples" / "models" / "weights.py", models / "weights.py")
    monkeypatch.setattr(gpu_check, "CASES_DIR", cases)
    monkeypatch.setattr(gpu_check, "MODELS_DIR", models)
    monkeypatch.setattr(gpu_check, "BENCH_SECONDS", 0.05)
    out = tmp_path / "out"
    code = gpu_check.main(["--emulated", "--only", "cases,models", "--out", str(out),
                           "--budget", "200"])
    results = json.loads((out / "results.json").read_text())
    assert code == 0, capsys.readouterr().out
    assert [r["case"] for r in results["rows"]] == ["mlp", "models/mlp"]
    for row in results["rows"]:
        assert row["hloc"]["host_ms"] > 0 and row["hloc"]["resident_ms"] > 0
        assert "host_ms" in row["xla"] or "error" in row["xla"]  # jax may be missing
        assert row["match"] in ("yes", "-") or row["match"].startswith("yes")
    model = results["rows"][1]
    assert model["resident"] == f"0-{last - 1}" and model["hloc"]["resident_params"] == last
    text = (out / "gpu-check.md").read_text()
    assert "| models/mlp |" in text and "geomean" in text and "Traceback" not in text
