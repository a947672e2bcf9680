"""Small triangular solves as kernels (hloc/codegen/cpu/trsm.py): jax's trsm custom call for
every side, triangle, transpose and diagonal, batched, split into work units, in place and
with other layouts, against the reference interpreter (which solves in f64); larger matrices
stay on LAPACK."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from hloc.codegen.cpu import trsm
from hloc.codegen.cpu.kernel import RootItem
from hloc.ir.custom_calls import lapack_config
from hloc.ir.text.parser import parse_module

from .support import kernels
from .support.bundles import kernels_json
from .support.run import compare_with_interpreter

pytestmark = pytest.mark.cpu
RNG = np.random.default_rng(11)
OPTIONS = list(itertools.product("LR", "LU", "NTC", "NU"))


def trsm_text(dtype, batch, n, m, side, uplo, trans, diag, b_layout="", alias=False) -> str:
    b_dims = (*batch, n, m) if side == "L" else (*batch, m, n)
    a_shape = f"{dtype}[{','.join(map(str, (*batch, n, n)))}]"
    b_shape = f"{dtype}[{','.join(map(str, b_dims))}]"
    aliasing = ", output_to_operand_aliasing={{}: (1, {})}" if alias else ""
    return f"""HloModule trsm
ENTRY e {{
  a = {a_shape} parameter(0)
  b = {b_shape}{b_layout} parameter(1)
  ROOT x = {b_shape} custom-call(a, b), custom_call_target="lapack_{dtype[0].replace('f', 's') if dtype == 'f32' else 'd'}trsm_ffi"{aliasing}, backend_config={lapack_config(diag=diag, side=side, trans_x=trans, uplo=uplo)}
}}
"""


def operands(dtype, batch, n, m, side):
    """A well-conditioned triangle both ways (a dominant diagonal), random elsewhere."""
    a = RNG.standard_normal((*batch, n, n)) * 0.3 + np.eye(n) * (2 + RNG.random(n))
    b_dims = (*batch, n, m) if side == "L" else (*batch, m, n)
    return [a.astype(dtype), RNG.standard_normal(b_dims).astype(dtype)]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_every_option_against_the_interpreter(dtype):
    """All 24 option sets in one object, batched, each run whole and in three parts."""
    np_dtype = np.float32 if dtype == "f32" else np.float64
    cases = {}
    for k, (side, uplo, trans, diag) in enumerate(OPTIONS):
        batch, n, m = ((2, 3), 5, 7) if k % 2 else ((3,), 9, 300)
        module = parse_module(trsm_text(dtype, batch, n, m, side, uplo, trans, diag))
        assert trsm.as_solve(module.entry.root) is not None
        cases[f"k{k}"] = (module, operands(np_dtype, batch, n, m, side))
    kernels.entries_against_reference(cases, 2e-5 if dtype == "f32" else 1e-12)


def test_a_zero_diagonal_gives_infinities_as_lapack():
    a, b = operands(np.float32, (), 4, 3, "L")
    a[1, 1] = 0
    module = parse_module(trsm_text("f32", (), 4, 3, "L", "L", "N", "N"))
    compiled = kernels.Compiled([kernels.entry_spec(module, "z")])
    got = compiled.run("z", [a, b])[0]
    assert np.isinf(got[1]).all() or np.isnan(got[1]).any()
    np.testing.assert_array_equal(got[0], (b[0] / a[0, 0]).astype(np.float32))


@pytest.mark.parametrize("alias,b_layout", [
    (True, ""),  # jax's in-place call: x written over b, line by line
    (False, "{1,2,0}"),  # b column-major: the right-hand sides strided
    (True, "{1,2,0}"),  # in place: b copied to the output's layout first
])
def test_compiled_calls_in_place_and_in_other_layouts(alias, b_layout, tmp_path):
    text = trsm_text("f32", (4,), 16, 200, "L", "L", "N", "N", b_layout, alias)
    text = text.replace("HloModule trsm", "HloModule trsm, entry_computation_layout="
                        "{(f32[4,16,16]{2,1,0}, f32[4,16,200]" + (b_layout or "{2,1,0}")
                        + ")->f32[4,16,200]{2,1,0}}")
    outcomes = compare_with_interpreter({"c": (text, operands(np.float32, (4,), 16, 200, "L"))},
                                        tmp=tmp_path, rtol=2e-5, atol=2e-5)
    segments = {k: v["segments"] for k, v in kernels_json(outcomes["c"].artifact)["kernels"].items()}
    assert segments["x"] == ["trsm"], segments


def test_no_kernel_writes_in_place_across_layouts():
    """x over b line by line is only right where both have one layout."""
    text = trsm_text("f32", (2,), 4, 3, "L", "L", "N", "N", "{1,2,0}", alias=True)
    spec = kernels.entry_spec(parse_module(text))
    root = RootItem(spec.computation.root, (0,))
    assert trsm._plan(spec, root) is not None
    assert trsm._plan(replace(spec, aliases=((0, 1),)), root) is None


def test_matrices_above_the_limit_stay_on_lapack(tmp_path):
    n = trsm.MAX_ORDER + 1
    text = trsm_text("f32", (), n, 4, "L", "U", "N", "N")
    assert trsm.as_solve(parse_module(text).entry.root) is None
    compare_with_interpreter({"big": (text, operands(np.float32, (), n, 4, "L"))},
                             tmp=tmp_path, rtol=1e-4, atol=1e-4)
