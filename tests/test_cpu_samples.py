"""Every sample through the native CPU backend against XLA's own outputs.

NAME.pb (JAX's unoptimized module) and NAME.opt.pb (XLA's optimized module) both go through
the -O2 CPU pipeline, buffer assignment, thunk emission and LLVM code generation into a
bundle, which the CPU runtime loads and runs on NAME.inputs.npz; the results must match
NAME.expected.npz within the sample's tolerance (bit-exact where the tolerance is 0).
"""

from __future__ import annotations

import pytest

from hloc.runtime.cpu.memory import SCRATCH
from tests.conftest import SAMPLES, sample_arrays, sample_meta, sample_names
from tests.test_interp_samples import mismatch

from .support.bundles import load_cpu, sample_bundle

pytestmark = pytest.mark.cpu

CASES = [(name, suffix) for name in sample_names() + sample_names("ops")
         for suffix in (".pb", ".opt.pb") if (SAMPLES / f"{name}{suffix}").exists()]


@pytest.mark.parametrize("name,suffix", CASES, ids=[f"{n}{s}" for n, s in CASES])
def test_sample_on_cpu(name, suffix, tmp_path):
    bundle = sample_bundle(SAMPLES / f"{name}{suffix}", tmp_path / "s.bundle")
    exe = load_cpu(bundle)
    # Every composite's scratch was placed by buffer assignment (so temp_bytes counts it).
    assert exe.memory.sizes[SCRATCH] == 0
    got = exe.run(sample_arrays(name, "inputs"))
    expected = sample_arrays(name, "expected")
    assert len(got) == len(expected)
    meta = sample_meta(name)
    problems = [f"out{i}: {why}" for i, (g, e, d) in enumerate(zip(got, expected, meta["outputs"],
                                                                    strict=True))
                if (why := mismatch(g, e, d)) is not None]
    assert not problems, "; ".join(problems)


def test_corpus_present():
    if not CASES:
        pytest.skip("no samples generated")
    assert any(s == ".opt.pb" for _, s in CASES)
