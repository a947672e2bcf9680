"""Harness for CPU codegen tests: HLO text → kernels → JIT → compare with the interpreter.

Other test_codegen_* files import the helpers here; the tests at the bottom check the
harness itself (a wrong kernel must fail the comparison).
"""

from __future__ import annotations

import numpy as np
import pytest

from hloc.codegen.cpu import KernelSpec, emit_kernels
from hloc.codegen.cpu.harness import LoadedKernels
from hloc.codegen.target import host_target
from hloc.ir import Computation, Module, PrimitiveType, dtypes
from hloc.ir.parser import parse_module
from hloc.runtime.interpreter import evaluate_computation

pytestmark = pytest.mark.cpu

FLOAT_TYPES = ["f32", "f64", "bf16", "f16"]
F8_TYPES = ["f8e5m2", "f8e4m3fn", "f8e4m3", "f8e3m4", "f8e4m3fnuz", "f8e5m2fnuz",
            "f8e4m3b11fnuz", "f4e2m1fn"]
INT_TYPES = ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "s4", "u4", "s2", "u2"]


def entry_spec(module: Module, name: str = "kernel") -> KernelSpec:
    """The whole entry computation as one kernel (it is treated like a fused computation)."""
    return computation_spec(module.entry, name)


def computation_spec(comp: Computation, name: str) -> KernelSpec:
    params = comp.parameters
    return KernelSpec(name, comp, (comp.name,), tuple(p.shape for p in params),
                      tuple(s for _, s in comp.root.shape.leaves()))


def edge_values(type_name: str) -> np.ndarray:
    """Edge-case values of a type (NaN, ±inf, ±0, denormals, limits, halfway cases)."""
    dt = dtypes.to_numpy(dtypes.from_name(type_name))
    d = dtypes.info(dtypes.from_name(type_name))
    if d.kind == "pred":
        return np.array([False, True])
    if d.kind in ("int", "uint"):
        lo, hi = (-(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1) if d.kind == "int" else \
            (0, (1 << d.bits) - 1)
        vals = {lo, hi, 0, 1, lo + 1, hi - 1, 2, 3, d.bits - 1, d.bits, d.bits + 1, 7, 13}
        vals |= {-1, -2, -7} if d.kind == "int" else set()
        keep = sorted(v for v in vals if lo <= v <= hi)
        if d.bits == 64 and d.kind == "uint":
            return np.array(keep, dtype=np.uint64)
        return np.array(keep, dtype=np.int64).astype(dt)
    import ml_dtypes

    fi = ml_dtypes.finfo(dt)
    base = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 0.1, -0.7, 7.25, 100.0, -33.0,
            float(fi.max), -float(fi.max), float(fi.smallest_normal), -float(fi.smallest_normal),
            float(fi.smallest_subnormal), -float(fi.smallest_subnormal), np.inf, -np.inf, np.nan,
            1e-30, 65504.0, 1e30, 88.5, -103.0, 1e6]
    with np.errstate(all="ignore"):
        return np.array(base, dtype=np.float64).astype(dt)


def random_values(type_name: str, n: int, rng: np.random.Generator, scale: float = 3.0):
    dt = dtypes.to_numpy(dtypes.from_name(type_name))
    d = dtypes.info(dtypes.from_name(type_name))
    if d.kind == "pred":
        return rng.random(n) < 0.5
    if d.kind in ("int", "uint"):
        lo, hi = (-(1 << (d.bits - 1)), (1 << (d.bits - 1))) if d.kind == "int" else (0, 1 << d.bits)
        return rng.integers(lo, hi, n, dtype=np.int64 if d.bits < 64 else
                            (np.int64 if d.kind == "int" else np.uint64)).astype(dt)
    with np.errstate(all="ignore"):
        return (rng.standard_normal(n) * scale).astype(dt)


def random_inputs(comp: Computation, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in comp.parameters:
        flat = random_values(p.shape.dtype.name, p.shape.num_elements, rng)
        out.append(np.asarray(flat).reshape(p.shape.dims))
    return out


def as_comparable(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    d = dtypes.info(dtypes.from_numpy(x.dtype))
    if d.is_float and x.dtype.itemsize < 4:
        return x.astype(np.float32)
    if d.is_integral and x.dtype.kind not in "iu":
        return x.astype(np.int64)
    return x


def assert_matches(got, ref, *, rtol: float = 0.0, atol: float = 0.0, what: str = "") -> None:
    """Exact (NaN == NaN, -0 != +0 when exact) unless tolerances are given."""
    g, r = as_comparable(got), as_comparable(ref)
    assert g.shape == r.shape, f"{what}: shape {g.shape} != {r.shape}"
    if g.dtype.kind != "f":
        bad = g != r
        assert not bad.any(), f"{what}: {bad.sum()} mismatches, first at {np.argwhere(bad)[0]}: " \
                              f"got {g[bad][:5]} want {r[bad][:5]}"
        return
    nan_g, nan_r = np.isnan(g), np.isnan(r)
    assert (nan_g == nan_r).all(), f"{what}: NaN positions differ at {np.argwhere(nan_g != nan_r)[:5]}" \
        f" got {g[nan_g != nan_r][:5]} want {r[nan_g != nan_r][:5]}"
    keep = ~nan_r
    g, r = g[keep], r[keep]
    if rtol == 0 and atol == 0:
        same = (g == r) & (np.signbit(g) == np.signbit(r))
    else:
        with np.errstate(all="ignore"):
            same = (g == r) | (np.abs(g - r) <= atol + rtol * np.abs(r))
    assert same.all(), f"{what}: {(~same).sum()} mismatches: got {g[~same][:6]} want {r[~same][:6]}"


class Compiled:
    """Kernels for some computations of one module, emitted into one object and loaded."""

    def __init__(self, specs: list[KernelSpec], opt_level: int = 2, target=None):
        self.specs = {s.name: s for s in specs}
        self.target = target or host_target()
        self.emitted = emit_kernels(specs, self.target, opt_level)
        self.loaded = LoadedKernels(self.emitted, self.target)

    def run(self, name: str, inputs, chunks: int = 1) -> list[np.ndarray]:
        return self.loaded.run(self.specs[name], list(inputs), chunks=chunks)


def reference(comp: Computation, inputs) -> list[np.ndarray]:
    value = evaluate_computation(comp, [np.asarray(a) for a in inputs])
    if isinstance(value, tuple):
        from hloc.codegen.elemental.compose import flatten

        return [np.asarray(v) for v in flatten(value)]
    return [np.asarray(value)]


def check_hlo(text: str, inputs=None, *, rtol: float = 0.0, atol: float = 0.0, seed: int = 0,
              chunks: int = 1, opt_level: int = 2) -> list[np.ndarray]:
    """Compile the entry of `text` as one kernel, run it, compare with the interpreter."""
    module = parse_module(text)
    spec = entry_spec(module)
    inputs = random_inputs(module.entry, seed) if inputs is None else inputs
    got = Compiled([spec], opt_level).run(spec.name, inputs, chunks=chunks)
    want = reference(module.entry, inputs)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_matches(g, w, rtol=rtol, atol=atol, what=f"output {i}")
    return got


# ---- the harness itself ------------------------------------------------------------------------

ADD = """
HloModule m
ENTRY e {
  a = f32[3,5] parameter(0)
  b = f32[3,5] parameter(1)
  ROOT c = f32[3,5] add(a, b)
}
"""


def test_harness_runs_and_compares():
    check_hlo(ADD)


def test_harness_detects_a_wrong_result():
    module = parse_module(ADD)
    spec = entry_spec(module)
    inputs = random_inputs(module.entry)
    got = Compiled([spec]).run(spec.name, inputs)[0]
    with pytest.raises(AssertionError):
        assert_matches(got + np.float32(1e-3), reference(module.entry, inputs)[0])


def test_edge_values_cover_specials():
    f = edge_values("f32")
    assert np.isnan(f).any() and np.isinf(f).any() and (f[np.isfinite(f)] != 0).any()
    assert edge_values("s8").min() == -128 and edge_values("u4").max() == 15
    assert PrimitiveType.F32 == dtypes.from_name("f32")
