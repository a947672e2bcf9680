"""Semantic preservation on the sample corpus: every sample (top level and samples/ops) run
through the optimization passes (verifier after every pass) computes, in the reference
interpreter, what it computed before (bit for bit, up to the sign of zero and NaN payloads)
and what XLA computed (NAME.expected.npz within NAME.json's tolerance)."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.errors import UnsupportedError
from hloc.frontend import load
from hloc.runtime.interpreter import evaluate
from tests.conftest import SAMPLES, sample_arrays, sample_meta, sample_names
from tests.test_interp_samples import mismatch

from .support.golden import ML_FLOATS, bits_equal
from .support.hlo import run_passes

pytestmark = pytest.mark.pure

NAMES = sample_names() + sample_names("ops")
PIPELINE = ("inline,fixpoint(simplify,fold,tuple-simplifier,conditional-simplifier,"
            "while-loop-simplifier,cse,dce)")
SINGLE = ["simplify", "fold", "cse", "tuple-simplifier", "conditional-simplifier",
          "while-loop-simplifier"]


def same_up_to_zero_sign(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-equal except that -0.0 may stand for +0.0 (the reduce rule's XLA-faithful case)."""
    if bits_equal(a, b):
        return True
    if a.dtype.kind not in "fc" and a.dtype.name not in ML_FLOATS:
        return False
    za = np.asarray(a).astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    zb = np.asarray(b).astype(za.dtype)
    zeros = (za == 0) & (zb == 0)
    return bits_equal(np.where(zeros, 0, za), np.where(zeros, 0, zb))


def check_sample(name: str, spec: str, suffix: str = ".pb", numerics: str = "") -> None:
    """`spec` keeps every value of the module after `numerics` (the passes that move values
    to XLA's rounding on purpose), and XLA's outputs stay within tolerance."""
    module = load(SAMPLES / f"{name}{suffix}").module
    args = sample_arrays(name, "inputs")
    if numerics:
        run_passes(module, numerics)
    try:
        before = evaluate(module, args).flatten()
    except UnsupportedError as e:
        pytest.skip(f"the interpreter cannot run {name}: {e}")
    run_passes(module, spec)
    after = evaluate(module, args).flatten()
    assert len(after) == len(before)
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        assert same_up_to_zero_sign(np.asarray(b), np.asarray(a)), f"out{i} changed"
    # Against XLA: outputs the interpreter already got wrong before the passes are the
    # interpreter's business (tests/test_interp_samples.py), not the passes'.
    expected = sample_arrays(name, "expected")
    problems = [f"out{i}: {why}" for i, (b, g, e, d) in
                enumerate(zip(before, after, expected, sample_meta(name)["outputs"], strict=True))
                if mismatch(np.asarray(b), e, d) is None
                and (why := mismatch(np.asarray(g), e, d)) is not None]
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize("name", NAMES)
def test_pipeline_preserves_results(name):
    check_sample(name, PIPELINE)


@pytest.mark.parametrize("name", NAMES)
def test_default_pipeline_preserves_results(name):
    from hloc.passes.pipelines import XLA_NUMERICS, pipeline_spec

    check_sample(name, pipeline_spec("interpreter", 2), numerics=",".join(XLA_NUMERICS))


OPTIMIZED = [n for n in NAMES if (SAMPLES / f"{n}.opt.pb").exists()]


@pytest.mark.parametrize("name", OPTIMIZED)
def test_pipeline_on_xla_optimized_modules(name):
    """XLA's own output (fusions, bitcasts, layouts, copies, a schedule) stays valid too."""
    check_sample(name, PIPELINE.replace("inline,", ""), ".opt.pb")


@pytest.mark.slow
@pytest.mark.parametrize("spec", SINGLE)
@pytest.mark.parametrize("name", NAMES)
def test_each_pass_preserves_results(name, spec):
    check_sample(name, spec)


def test_pipeline_shrinks_the_corpus():
    """The passes do real work on real models: the corpus loses instructions."""
    if not NAMES:
        pytest.skip("no samples generated")
    before = after = 0
    for name in sample_names():
        module = load(SAMPLES / f"{name}.pb").module
        before += module.instruction_count()
        run_passes(module, PIPELINE)
        after += module.instruction_count()
    assert after < 0.85 * before
