"""The full default pipelines on every sample: the verifier after every pass, and the reference
interpreter must reproduce XLA's expected outputs (within NAME.json's tolerances) both before and
after, so every pass of the pipeline preserves semantics on real JAX programs.

Also the fusion report: `python -m tests.test_pipelines_samples` prints, per sample, our fusion
and kernel counts at -O2 next to XLA's (`xla_fusion_count`, and the kernels of XLA's optimized
module counted the same way); a test keeps our kernel total from drifting above XLA's.
"""

from __future__ import annotations

import numpy as np
import pytest

from hloc.frontend import load
from hloc.passes import PassRunner
from hloc.passes.fusion.cost import fusion_count, kernel_count
from hloc.passes.pipelines import default_pipeline
from hloc.runtime.interpreter import evaluate

from .conftest import SAMPLES, require_samples, sample_arrays, sample_meta, sample_names
from .test_interp_samples import mismatch

pytestmark = pytest.mark.pure
NAMES = sample_names() + sample_names("ops")
# The interpreter's -O2 pipeline on every sample is test_pass_samples'
# test_default_pipeline_preserves_results (the verifier after every pass, results bit for bit
# and against XLA) and, through a bundle, test_interpreter_bundles.
PIPELINES = [("cpu", 2), ("cpu", 3)]


def _problems(module, name: str) -> list[str]:
    meta = sample_meta(name)
    results = evaluate(module, sample_arrays(name, "inputs")).flatten()
    expected = sample_arrays(name, "expected")
    if len(results) != len(expected):
        return [f"{len(results)} outputs, expected {len(expected)}"]
    return [f"out{i}: {why}" for i, (got, want, desc) in
            enumerate(zip(results, expected, meta["outputs"], strict=True))
            if (why := mismatch(np.asarray(got), want, desc)) is not None]


def optimized(name: str, target: str, level: int):
    """The sample after the pipeline, for counting (test_pipeline_preserves_xla_outputs
    verifies the same runs after every pass)."""
    module = load(SAMPLES / f"{name}.pb").module
    PassRunner(default_pipeline(target, level)).run(module)
    return module


@pytest.mark.parametrize("target,level", PIPELINES, ids=[f"{t}-O{lv}" for t, lv in PIPELINES])
@pytest.mark.parametrize("name", NAMES)
def test_pipeline_preserves_xla_outputs(name, target, level):
    module = load(SAMPLES / f"{name}.pb").module
    before = _problems(module, name)
    assert not before, "interpreter disagrees with XLA before optimizing: " + "; ".join(before)
    PassRunner(default_pipeline(target, level), verify=True).run(module)
    after = _problems(module, name)
    assert not after, f"after -O{level} ({target}): " + "; ".join(after)


def fusion_table(level: int = 2) -> list[tuple[str, int, int, int, int]]:
    """(sample, our fusions, XLA's fusions, our kernels, XLA's kernels) at cpu -O`level`."""
    rows = []
    for name in NAMES:
        ours = optimized(name, "cpu", level)
        xla = load(SAMPLES / f"{name}.opt.pb").module
        rows.append((name, fusion_count(ours), sample_meta(name).get("xla_fusion_count", 0),
                     kernel_count(ours), kernel_count(xla)))
    return rows


def test_kernel_count_stays_at_or_below_xlas():
    require_samples()
    rows = fusion_table(2)
    ours, xla = sum(r[3] for r in rows), sum(r[4] for r in rows)
    assert ours <= xla, f"-O2 launches {ours} kernels over the samples, XLA {xla}"
    assert sum(r[1] for r in rows) > 0


def test_multi_output_fusion_reduces_kernels_further():
    require_samples()
    names = [n for n in ("batchnorm", "reductions", "attention_grad") if n in NAMES]
    if not names:
        pytest.skip("samples missing")
    o2 = sum(kernel_count(optimized(n, "cpu", 2)) for n in names)
    o3 = sum(kernel_count(optimized(n, "cpu", 3)) for n in names)
    assert o3 < o2


def main() -> None:
    rows = fusion_table(2)
    print(f"| {'sample':34} | fusions | XLA fusions | kernels | XLA kernels |")
    print(f"|{'-' * 36}|---------|-------------|---------|-------------|")
    for name, fus, xfus, ker, xker in rows:
        print(f"| {name:34} | {fus:7} | {xfus:11} | {ker:7} | {xker:11} |")
    totals = [sum(r[k] for r in rows) for k in range(1, 5)]
    print(f"| {'total':34} | {totals[0]:7} | {totals[1]:11} | {totals[2]:7} | {totals[3]:11} |")


if __name__ == "__main__":
    main()
