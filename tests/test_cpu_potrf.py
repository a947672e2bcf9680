"""Small Cholesky factorizations as kernels (hloc/codegen/cpu/potrf.py): jax's potrf custom call
for both triangles, f32 and f64, batched, split into work units, row- and column-major, in
place and not, against the reference interpreter (f64 factors); a matrix that is not positive
definite gives what the runtime's LAPACK path gives; larger matrices stay on LAPACK."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hloc.codegen.cpu import potrf
from hloc.codegen.cpu.kernel import RootItem
from hloc.ir.custom_calls import lapack_config
from hloc.ir.text.parser import parse_module
from hloc.runtime.lapack import native_call

from .support import kernels
from .support.bundles import kernels_json
from .support.run import compare_with_interpreter

pytestmark = pytest.mark.cpu
RNG = np.random.default_rng(12)


def potrf_text(dtype: str, batch: tuple[int, ...], n: int, uplo: str, layout: str = "",
               alias: bool = True) -> str:
    dims = ",".join(map(str, (*batch, n, n)))
    info = f"s32[{','.join(map(str, batch))}]"
    target = f"lapack_{'s' if dtype == 'f32' else 'd'}potrf_ffi"
    aliasing = ", output_to_operand_aliasing={{0}: (0, {})}" if alias else ""
    return f"""HloModule potrf
ENTRY e {{
  a = {dtype}[{dims}]{layout} parameter(0)
  ROOT c = ({dtype}[{dims}]{layout}, {info}) custom-call(a), custom_call_target="{target}"{aliasing}, backend_config={lapack_config(uplo=uplo)}
}}
"""


def spd(dtype, batch, n) -> np.ndarray:
    """Symmetric positive definite matrices with random entries in the other triangle too
    (the factorization must read only its own)."""
    g = RNG.standard_normal((*batch, n, n)) * 0.3
    a = g @ np.swapaxes(g, -1, -2) + np.eye(n) * (1 + RNG.random(n))
    noise = np.triu(RNG.standard_normal((*batch, n, n)), 1)
    return np.where(np.tril(np.ones((n, n), bool)), a, 0) + noise, a


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_both_triangles_against_the_interpreter(dtype):
    np_dtype = np.float32 if dtype == "f32" else np.float64
    cases = {}
    for k, (uplo, batch, n) in enumerate([("L", (3,), 9), ("U", (3,), 9), ("L", (2, 3), 5),
                                          ("U", (), 64), ("L", (4,), 33), ("U", (2,), 1)]):
        module = parse_module(potrf_text(dtype, batch, n, uplo))
        assert potrf.as_factor(module.entry.root) is not None
        lower, _ = spd(np.float64, batch, n)
        a = lower if uplo == "L" else np.swapaxes(lower, -1, -2)
        cases[f"k{k}"] = (module, [a.astype(np_dtype)])
    runs = kernels.entries_against_reference(cases, 2e-5 if dtype == "f32" else 1e-12)
    for name, (got, want) in runs.items():
        np.testing.assert_array_equal(got[1], np.zeros_like(want[1]), err_msg=name)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_not_positive_definite_as_the_lapack_path(uplo):
    """A matrix whose pivot is not positive (the 5th, the 1st) has status 1 and its asked-for
    triangle NaN, as on the runtime's LAPACK path (jax's kernel); the others are factored and
    the other triangle is never touched."""
    _, a = spd(np.float64, (3,), 8)
    a[1, 4, 4] -= 50.0
    a[2, 0, 0] = -1.0
    a = a.astype(np.float32)
    module = parse_module(potrf_text("f32", (3,), 8, uplo))
    got = kernels.Compiled([kernels.entry_spec(module, "p")]).run("p", [a.copy()])
    lapack = native_call(module.entry.root).run([a.copy()])
    np.testing.assert_array_equal(got[1], [0, 1, 1])
    np.testing.assert_array_equal(lapack[1], got[1])
    keep = np.tril(np.ones((8, 8), bool)) if uplo == "L" else np.triu(np.ones((8, 8), bool))
    np.testing.assert_allclose(got[0][0], lapack[0][0], rtol=2e-5, atol=2e-5)
    for m in (1, 2):
        assert np.isnan(got[0][m][keep]).all() and np.isnan(lapack[0][m][keep]).all()
        np.testing.assert_array_equal(got[0][m][~keep], a[m][~keep])


@pytest.mark.parametrize("layout,alias", [
    ("", True),  # jax's call: factored over the operand
    ("{1,2,0}", True),  # column-major (jax's operand layout): columns are contiguous
    ("", False),  # copied first
])
def test_compiled_calls(layout, alias, tmp_path):
    text = potrf_text("f32", (6,), 40, "L", layout, alias)
    entry = f"f32[6,40,40]{layout or '{2,1,0}'}"
    text = text.replace("HloModule potrf", "HloModule potrf, entry_computation_layout={("
                        + entry + ")->(" + entry + ", s32[6]{0})}")
    a, _ = spd(np.float64, (6,), 40)
    outcomes = compare_with_interpreter({"c": (text, [a.astype(np.float32)])}, tmp=tmp_path,
                                        rtol=2e-5, atol=2e-5)
    segments = {k: v["segments"] for k, v in kernels_json(outcomes["c"].artifact)["kernels"].items()}
    assert segments["c"] == ["potrf"], segments


def test_no_kernel_factors_in_place_across_layouts():
    spec = kernels.entry_spec(parse_module(potrf_text("f32", (2,), 4, "L")))
    root = RootItem(spec.computation.root, (0, 1))
    in_place = replace(spec, aliases=((0, 0),))
    assert potrf._plan(in_place, root) is not None
    other = replace(spec.operand_shapes[0], layout=replace(spec.operand_shapes[0].layout,
                                                           minor_to_major=(1, 2, 0)))
    assert potrf._plan(replace(spec, operand_shapes=(other,)), root) is not None  # copied
    assert potrf._plan(replace(in_place, operand_shapes=(other,)), root) is None


def test_matrices_above_the_limit_stay_on_lapack(tmp_path):
    n = potrf.MAX_ORDER + 1
    text = potrf_text("f32", (), n, "U")
    assert potrf.as_factor(parse_module(text).entry.root) is None
    lower, _ = spd(np.float64, (), n)
    compare_with_interpreter({"big": (text, [np.swapaxes(lower, -1, -2).astype(np.float32)])},
                             tmp=tmp_path, rtol=1e-4, atol=1e-4)
