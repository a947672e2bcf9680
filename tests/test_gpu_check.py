"""tools/gpu_check.py without a GPU: the plan it prints, the no-GPU exit, its table, the
pytest summary it extracts, the output comparison and the step timeout."""

from __future__ import annotations

import sys

import numpy as np
import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "tools"))
import gpu_check  # noqa: E402

pytestmark = pytest.mark.pure


def test_dry_run_lists_tests_and_every_case(capsys, tmp_path):
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "-m gpu" in lines[0] and "pytest" in lines[0]
    names = gpu_check.case_names()
    assert names and len(lines) == 1 + 3 * len(names)
    for name in names:
        steps = [ln for ln in lines if f"{name}.pb" in ln or f"{name}.json" in ln]
        assert any(" compile " in s and "--arch sm_90" in s for s in steps)
        assert any(" hloc " in s for s in steps) and any(" xla " in s for s in steps)


def test_no_gpu_prints_one_line_and_exits_3(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_check, "detect_gpu", lambda: None)
    assert gpu_check.main(["--out", str(tmp_path / "o")]) == gpu_check.NO_GPU
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no NVIDIA GPU" in out
    assert not (tmp_path / "o").exists()


def test_table_rows_ratio_and_errors():
    rows = [{"case": "matmul_1024", "hloc": {"median_ms": 3.0}, "xla": {"median_ms": 2.0},
             "match": "yes"},
            {"case": "scan_rnn_200", "hloc": {"error": "compile timed out"}, "match": "-"}]
    table = gpu_check.format_table(rows).splitlines()
    assert table[0] == "| case | hloc ms | XLA ms | ratio | match | notes |"
    assert table[2] == "| matmul_1024 | 3.000 | 2.000 | 1.50 | yes |  |"
    assert table[3].startswith("| scan_rnn_200 | - | - | - | - | hloc: compile timed out")
    text = gpu_check.report(("NVIDIA H200", "sm_90"), "76 passed in 20s", rows, 120)
    assert "NVIDIA H200 (sm_90)" in text and "76 passed" in text


def test_pytest_summary():
    log = "....\n=== 71 passed, 5 failed in 10.85s ===\n"
    assert gpu_check.pytest_summary(log, 1) == "71 passed, 5 failed in 10.85s"
    assert gpu_check.pytest_summary("...", 124) == "timed out"


def test_outputs_match(tmp_path):
    a = np.linspace(0, 1, 10, dtype=np.float32)
    np.savez(tmp_path / "hloc.npz", out0=a, out1=a)
    np.savez(tmp_path / "xla.npz", out0=a * (1 + 1e-6), out1=a)
    assert gpu_check.outputs_match(tmp_path) == "yes"
    np.savez(tmp_path / "xla.npz", out0=a, out1=a + 1)
    assert gpu_check.outputs_match(tmp_path) == "no"
    (tmp_path / "xla.npz").unlink()
    assert gpu_check.outputs_match(tmp_path) == "-"


def test_step_timeout_is_124():
    code, text = gpu_check.run_step([sys.executable, "-c", "import time; time.sleep(30)"], 1)
    assert code == 124 and "timed out" in text
