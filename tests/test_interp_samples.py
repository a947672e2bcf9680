"""The reference interpreter against XLA itself: every sample (NAME.pb and XLA's optimized
NAME.opt.pb, top level and samples/ops) evaluated on NAME.inputs.npz must reproduce
NAME.expected.npz within the tolerance NAME.json records (integers and pred bit-exact)."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.frontend import load
from hloc.runtime.interpreter import evaluate
from tests.conftest import SAMPLES, sample_arrays, sample_meta, sample_names

pytestmark = pytest.mark.pure

CASES = [(name, suffix) for name in sample_names() + sample_names("ops")
         for suffix in (".pb", ".opt.pb") if (SAMPLES / f"{name}{suffix}").exists()]


def mismatch(got: np.ndarray, expected: np.ndarray, desc: dict) -> str | None:
    """Why `got` is not an acceptable result (None if it is)."""
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if got.dtype != expected.dtype:
        return f"dtype {got.dtype}, expected {expected.dtype}"
    rtol, atol = desc.get("rtol", 0.0), desc.get("atol", 0.0)
    if expected.dtype.kind in "biu" or (rtol == 0 and atol == 0):
        if got.tobytes() == expected.tobytes():
            return None
        bad = np.argwhere(got.view(np.uint8).reshape(got.shape + (-1,)).any(-1)
                          != expected.view(np.uint8).reshape(got.shape + (-1,)).any(-1)) \
            if got.ndim else np.zeros((0, 0), int)
        return f"not bit-exact ({bad.shape[0] or 'some'} elements differ)"
    wide = np.complex128 if expected.dtype.kind == "c" else np.float64
    g, e = got.astype(wide), expected.astype(wide)
    ok = np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    if ok.all():
        return None
    first = tuple(np.argwhere(~ok)[0])
    return (f"{int((~ok).sum())}/{ok.size} elements outside rtol={rtol} atol={atol}, "
            f"e.g. {first}: got {g[first]}, expected {e[first]}")


@pytest.mark.parametrize("name,suffix", CASES, ids=[f"{n}{s}" for n, s in CASES])
def test_sample(name, suffix):
    meta = sample_meta(name)
    module = load(SAMPLES / f"{name}{suffix}").module
    results = evaluate(module, sample_arrays(name, "inputs")).flatten()
    expected = sample_arrays(name, "expected")
    assert len(results) == len(expected), f"{len(results)} outputs, expected {len(expected)}"
    problems = [f"out{i}: {why}" for i, (g, e, d) in enumerate(zip(results, expected, meta["outputs"],
                                                                    strict=True))
                if (why := mismatch(np.asarray(g), e, d)) is not None]
    assert not problems, "; ".join(problems)


def test_corpus_present():
    if not CASES:
        pytest.skip("no samples generated")
    assert any(s == ".opt.pb" for _, s in CASES)
