"""Every sample, unoptimized and XLA-optimized, compiles to an interpreter bundle whose run
gives XLA's outputs (the user path: hloc compile → bundle file → hlo-run's loader)."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.bundle import write_bundle
from hloc.compiler import CompileOptions, compile_model
from hloc.runtime import load

from .conftest import SAMPLES, require_samples, sample_arrays, sample_meta, sample_names

CASES = [f"{n}{suffix}" for n in sample_names() + sample_names("ops") for suffix in (".pb", ".opt.pb")]


def _check(name: str, got: list[np.ndarray]) -> None:
    meta = sample_meta(name)
    expected = sample_arrays(name, "expected")
    assert len(got) == len(expected)
    for i, (g, e, spec) in enumerate(zip(got, expected, meta["outputs"], strict=True)):
        assert g.shape == e.shape and g.dtype == e.dtype, f"out{i}"
        if e.dtype.kind in "biu" or spec.get("rtol", 1) == 0 and spec.get("atol", 1) == 0:
            assert g.tobytes() == e.tobytes() or np.array_equal(g, e, equal_nan=True), f"out{i} differs"
            continue
        np.testing.assert_allclose(g.astype(np.float64) if g.dtype.kind != "c" else g,
                                   e.astype(np.float64) if e.dtype.kind != "c" else e,
                                   rtol=spec["rtol"], atol=spec["atol"], equal_nan=True, err_msg=f"out{i}")


@pytest.mark.parametrize("case", CASES or ["(no samples)"])
def test_sample_bundle_matches_xla(case, tmp_path):
    require_samples()
    name = case[: -len(".opt.pb")] if case.endswith(".opt.pb") else case[: -len(".pb")]
    result = compile_model(str(SAMPLES / case), CompileOptions(target="interpreter"))
    path = tmp_path / "m.bundle"
    write_bundle(path, manifest=result.manifest, members=result.members)
    exe = load(str(path))
    assert exe.device == "interpreter"
    _check(name, exe.run(sample_arrays(name, "inputs")))
