"""Helpers for the CUDA tests: compile HLO text for CUDA, run it on the emulator, compare
with the reference interpreter."""

from __future__ import annotations

import collections

import numpy as np

from hloc.codegen.cuda.harness import load_emulated
from hloc.ir.parser import parse_module
from hloc.runtime.interpreter import evaluate


def random_array(shape, dtype, rng) -> np.ndarray:
    dt = np.dtype({"f32": "float32", "i4": "int32", "bool": "bool"}.get(dtype, dtype))
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(-50 if dt.kind == "i" else 0, 50, size=shape).astype(dt)
    return (rng.standard_normal(shape) * 3).astype(dt)


def emulate_hlo(text: str, inputs, **kwargs):
    """(emulated outputs, reference outputs, executable) of HLO text on `inputs`."""
    want = evaluate(parse_module(text), inputs).flatten()
    ex = load_emulated(parse_module(text), **kwargs)
    return ex.run(inputs), want, ex


def variants(ex) -> collections.Counter:
    return collections.Counter(r.variant for r in ex.program.kernels)


def assert_close(got, want, rtol=1e-5, atol=1e-6) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=atol, equal_nan=True)
