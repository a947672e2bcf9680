"""Temp memory against XLA as a user compiles: every sample's, benchmark case's and whole
model's unoptimized module (NAME.pb) through hloc's default CPU pipeline and buffer assignment
must need no more temp bytes than XLA CPU's buffer assignment of the same module (issue 16).

XLA's numbers are recorded, never hand-written: `xla_temp_bytes` in samples/NAME.json
(samples/generate.py) and samples/models/NAME.json (samples/models/generate.py), and
benchmarks/cases/xla_memory.json (benchmarks/xla_memory.py), all from
`compiled.memory_analysis()` in the jax venv. (tests/test_buffers_samples.py compares on
XLA's own optimized modules instead.)
"""

from __future__ import annotations

import json

import pytest

from hloc.frontend import load
from hloc.passes import PassRunner
from hloc.passes.pipelines import default_pipeline
from hloc.plan import plan
from tests.conftest import ROOT, SAMPLES, sample_meta, sample_names

pytestmark = pytest.mark.pure

CASES_DIR = ROOT / "benchmarks" / "cases"
TABLE = CASES_DIR / "xla_memory.json"
MODELS = SAMPLES / "models"
SLOW = {"models/resnet50"}  # about 3 s of passes on two loaded cores, and far below XLA


def _recorded() -> list[tuple[str, object, int]]:
    """(id, model path, XLA temp bytes) for every sample, case and model with a number."""
    out = [(name, SAMPLES / f"{name}.pb", meta["xla_temp_bytes"]) for name in sample_names()
           if (SAMPLES / f"{name}.json").exists()
           and (meta := sample_meta(name)).get("xla_temp_bytes") is not None]
    if TABLE.exists():
        cases = json.loads(TABLE.read_text())["cases"]
        out += [(f"case/{name}", CASES_DIR / f"{name}.pb", mem["temp_bytes"])
                for name, mem in sorted(cases.items()) if (CASES_DIR / f"{name}.pb").exists()]
    for meta_path in sorted(MODELS.glob("*.json")):
        temp = json.loads(meta_path.read_text()).get("xla_temp_bytes")
        if temp is not None and meta_path.with_suffix(".pb").exists():
            out.append((f"models/{meta_path.stem}", meta_path.with_suffix(".pb"), temp))
    return out


RECORDED = _recorded()


def hloc_temp_bytes(path) -> int:
    """Temp bytes of `path` compiled as `hloc compile` does (-O2, CPU), up to buffers."""
    module = load(str(path)).module
    PassRunner(default_pipeline("cpu", 2)).run(module)
    return plan(module, target="cpu").memory.temp_bytes


def _params() -> list:
    return [pytest.param(p, x, id=n, marks=pytest.mark.slow if n in SLOW else ())
            for n, p, x in RECORDED]


@pytest.mark.parametrize("path,xla", _params())
def test_temp_bytes_at_most_xla(path, xla):
    ours = hloc_temp_bytes(path)
    assert ours <= xla, f"hloc needs {ours} temp bytes, XLA {xla} ({ours / max(xla, 1):.2f}x)"


def test_recorded_numbers_present():
    assert any(n.startswith("case/") for n, _, _ in RECORDED), "run benchmarks/xla_memory.py"
    assert {"models/mobilenet_v2", "models/bert_encoder", "models/lstm"} <= {
        n for n, _, _ in RECORDED}
    assert len(RECORDED) > 8
