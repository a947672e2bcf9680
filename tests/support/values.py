"""Test values and comparisons: edge values and random values of every type, and the
tolerant / exact comparison of backend results with the interpreter's."""

from __future__ import annotations

import numpy as np

from hloc.ir import Computation, dtypes

FLOAT_TYPES = ["f32", "f64", "bf16", "f16"]
F8_TYPES = ["f8e5m2", "f8e4m3fn", "f8e4m3", "f8e3m4", "f8e4m3fnuz", "f8e5m2fnuz",
            "f8e4m3b11fnuz", "f4e2m1fn"]
INT_TYPES = ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "s4", "u4", "s2", "u2"]


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
    if g.dtype.kind == "c" and r.dtype.kind == "c":  # each part as a float (NaN == NaN)
        assert_matches(g.real, r.real, rtol=rtol, atol=atol, what=f"{what} (real part)")
        assert_matches(g.imag, r.imag, rtol=rtol, atol=atol, what=f"{what} (imaginary part)")
        return
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


def multiply_add(x: np.ndarray, y: np.ndarray, z, *, fused: bool) -> np.ndarray:
    """x*y + z in x's float type (f32 or narrower), the product rounded first, or, `fused`,
    rounded once as an FMA computes it (the exact sum in f64, rounded to x's type: double
    rounding can differ from a true FMA by one unit in rare halfway cases)."""
    if not fused:
        return (x * y + z).astype(x.dtype)
    wide = x.astype(np.float64) * y.astype(np.float64) + np.float64(z)
    return wide.astype(x.dtype)


def assert_matches_one_of(got, refs, *, rtol: float, atol: float = 0.0, what: str = "") -> None:
    """Each element of `got` matches the same element of at least one of `refs` (within the
    tolerances): for code whose rounding may differ element by element, e.g. where LLVM
    fuses a product into an add in some loops and not in others."""
    g = as_comparable(got)
    with np.errstate(all="ignore"):
        ok = np.zeros(g.shape, bool)
        for ref in refs:
            r = as_comparable(ref)
            ok |= (g == r) | (np.isnan(g) & np.isnan(r)) | (np.abs(g - r) <= atol + rtol * np.abs(r))
    assert ok.all(), f"{what}: {(~ok).sum()} mismatches: got {g[~ok][:6]} " + \
        " or ".join(f"want {as_comparable(r)[~ok][:6]}" for r in refs)


def random_array(shape, dtype, rng) -> np.ndarray:
    dt = np.dtype({"f32": "float32", "i4": "int32", "bool": "bool"}.get(dtype, dtype))
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(-50 if dt.kind == "i" else 0, 50, size=shape).astype(dt)
    return (rng.standard_normal(shape) * 3).astype(dt)


def assert_close(got, want, rtol=1e-5, atol=1e-6, what="") -> None:
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, i, g.shape, w.shape, g.dtype,
                                                           w.dtype)
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{what} out{i}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=atol, equal_nan=True, err_msg=f"{what} out{i}")


def bits(a) -> np.ndarray:
    """The raw bits of a float array (integers and bools as they are)."""
    a = np.asarray(a)
    if a.dtype.kind in "biu":
        return a
    return a.view(f"u{a.dtype.itemsize}")


def assert_same_bits(got, want, what="") -> None:
    """Same shapes, dtypes and bits (NaN payloads and signs of zeros included)."""
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, i, g.shape, w.shape)
        np.testing.assert_array_equal(bits(g), bits(w), err_msg=f"{what} out{i}")
