"""Small dots as native CPU kernels (hloc/codegen/cpu/dot.py) against the reference interpreter.

Every dimension-number form (batch, transposed, vector, several contracting/free dims, empty
dims, non-default layouts), element type (f32/f64/bf16/f16, signed/unsigned integers with
wrap-around) and tile shape (row/column tails, rows wider than one tile) as a Gemm thunk's
kernel, and fused forms: epilogues, several dots, a dot read through a transpose and a reduce,
a dot feeding a dot. kernels.json shows which path ran, so a case cannot pass through BLAS.
"""

from __future__ import annotations

import json
import re

import ml_dtypes
import numpy as np
import pytest

from hloc.codegen.cpu import dot as small_dot
from hloc.codegen.cpu.thunk_kernels import TRANSCENDENTAL_WORK
from hloc.ir import Opcode
from hloc.ir.text.parser import parse_module
from tests.conftest import SAMPLES, sample_arrays, sample_meta
from tests.test_interp_samples import mismatch

from .support.bundles import compile_bundle, dumped, kernels_json, load_cpu, members, sample_bundle
from .support.run import run_cases

pytestmark = pytest.mark.cpu

_NP = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "f16": np.float16,
       "s8": np.int8, "s32": np.int32, "s64": np.int64, "u8": np.uint8, "u32": np.uint32}
# Narrow floats: one rounding of an f32 sum; the order of the sum may move it by an ulp.
_TOL = {"bf16": (2e-2, 2e-2), "f16": (2e-3, 2e-3), "f64": (1e-12, 1e-12)}


def _parse(shape_text: str) -> tuple[str, list[int]]:
    dtype, rest = shape_text.split("[")
    dims = rest.split("]")[0]
    return dtype, [int(d) for d in dims.split(",") if d]


def _random(shape_text: str, rng) -> np.ndarray:
    dtype, dims = _parse(shape_text)
    if dtype[0] in "su":
        info = np.iinfo(_NP[dtype])
        return rng.integers(info.min, info.max, dims, endpoint=True).astype(_NP[dtype])
    return rng.standard_normal(dims).astype(_NP[dtype])


def _module(lhs: str, rhs: str, out: str, dims: str) -> str:
    return (f"HloModule d\nENTRY e {{\n  a = {lhs} parameter(0)\n  b = {rhs} parameter(1)\n"
            f"  ROOT d = {out} dot(a, b){', ' + dims if dims else ''}\n}}\n")


def _assert_close(got, want, dtype: str, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, what
    if dtype[0] in "su":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    rtol, atol = _TOL.get(dtype, (1e-5, 1e-5))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol, err_msg=what)


def _thunks(node):
    """Every thunk record of thunks.json, nested ones included."""
    if isinstance(node, dict):
        if "kind" in node and "name" in node:
            yield node
        for value in node.values():
            yield from _thunks(value)
    elif isinstance(node, list):
        for value in node:
            yield from _thunks(value)


def assert_native_dots(bundle) -> list[str]:
    """No dot of the module runs in the library: every Gemm thunk has a dot kernel and no
    fusion is outlined into a composite. Returns the Gemm thunks."""
    kernels = kernels_json(bundle)
    thunks = list(_thunks(json.loads(members(bundle)["thunks.json"])["sequence"]))
    assert not kernels["composites"], sorted(kernels["composites"])
    gemms = [t["name"] for t in thunks if t["kind"] == "gemm"]
    assert all(kernels["kernels"][name]["segments"] == ["dot"] for name in gemms), gemms
    return gemms


LC1_RC0 = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
GEMMS = [
    ("f32[3,5]{1,0}", "f32[5,7]{1,0}", "f32[3,7]{1,0}", LC1_RC0),
    ("f32[5,3]{1,0}", "f32[5,7]{1,0}", "f32[3,7]{1,0}",
     "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    ("f32[3,5]{1,0}", "f32[7,5]{1,0}", "f32[3,7]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
    ("f32[5,3]{1,0}", "f32[7,5]{1,0}", "f32[3,7]{1,0}",
     "lhs_contracting_dims={0}, rhs_contracting_dims={1}"),
    ("f32[2,3,5]{2,1,0}", "f32[2,5,7]{2,1,0}", "f32[2,3,7]{2,1,0}",
     "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"),
    ("f32[3,2,5]{2,1,0}", "f32[5,7,2]{2,1,0}", "f32[2,3,7]{2,1,0}",
     "lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={2}, rhs_contracting_dims={0}"),
    ("f32[2,3,4,5]{3,2,1,0}", "f32[2,3,5,6]{3,2,1,0}", "f32[2,3,4,6]{3,2,1,0}",
     "lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, "
     "rhs_contracting_dims={2}"),
    ("f32[4,3,5]{2,1,0}", "f32[3,5,6]{2,1,0}", "f32[4,6]{1,0}",
     "lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}"),
    ("f32[2,3,5]{2,1,0}", "f32[5,4,3]{2,1,0}", "f32[2,3,4,3]{3,2,1,0}",
     "lhs_contracting_dims={2}, rhs_contracting_dims={0}"),
    ("f32[7,9]{1,0}", "f32[9]{0}", "f32[7]{0}", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    ("f32[9]{0}", "f32[9,6]{1,0}", "f32[6]{0}", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    ("f32[4]{0}", "f32[5]{0}", "f32[4,5]{1,0}", ""),
    ("f32[6,5]{0,1}", "f32[5,4]{0,1}", "f32[6,4]{0,1}", LC1_RC0),
    ("f32[6,5]{1,0}", "f32[5,4]{0,1}", "f32[6,4]{0,1}", LC1_RC0),
    # Row and column tails, rows wider than a tile, one row, one column.
    ("f32[13,70]{1,0}", "f32[70,100]{1,0}", "f32[13,100]{1,0}", LC1_RC0),
    ("f32[29,31]{1,0}", "f32[31,37]{1,0}", "f32[29,37]{1,0}", LC1_RC0),
    ("f32[1,64]{1,0}", "f32[64,300]{1,0}", "f32[1,300]{1,0}", LC1_RC0),
    ("f32[300,64]{1,0}", "f32[64,1]{1,0}", "f32[300,1]{1,0}", LC1_RC0),
    ("f64[6,9]{1,0}", "f64[9,11]{1,0}", "f64[6,11]{1,0}", LC1_RC0),
    ("f64[6,9]{1,0}", "f64[11,9]{1,0}", "f64[6,11]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
    ("bf16[5,8]{1,0}", "bf16[8,6]{1,0}", "bf16[5,6]{1,0}", LC1_RC0),
    ("bf16[5,8]{1,0}", "bf16[8,6]{1,0}", "f32[5,6]{1,0}", LC1_RC0),
    ("f16[5,8]{1,0}", "f16[6,8]{1,0}", "f16[5,6]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
    ("s32[4,5]{1,0}", "s32[5,3]{1,0}", "s32[4,3]{1,0}", LC1_RC0),
    ("s8[4,6]{1,0}", "s8[6,5]{1,0}", "s32[4,5]{1,0}", LC1_RC0),
    ("u8[4,6]{1,0}", "u8[6,5]{1,0}", "u8[4,5]{1,0}", LC1_RC0),
    ("s64[3,4]{1,0}", "s64[4,5]{1,0}", "s64[3,5]{1,0}", LC1_RC0),
    ("u32[2,3,4]{2,1,0}", "u32[2,4,5]{2,1,0}", "u32[2,3,5]{2,1,0}",
     "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"),
]
EMPTY = [
    ("f32[0,5]{1,0}", "f32[5,4]{1,0}", "f32[0,4]{1,0}", LC1_RC0),
    ("f32[6,0]{1,0}", "f32[0,4]{1,0}", "f32[6,4]{1,0}", LC1_RC0),
    ("f32[3,5]{1,0}", "f32[5,0]{1,0}", "f32[3,0]{1,0}", LC1_RC0),
]


# passes: the -O2 pipeline (dots canonicalized: transposes become kernels of their own), or
# layout assignment only (the dot keeps its dimension numbers: transposed operand reads).
@pytest.mark.parametrize("passes", [None, "layout-assignment"])
@pytest.mark.parametrize("lhs,rhs,out,dims", GEMMS + EMPTY,
                         ids=[f"{g[0]}x{g[1]}" for g in GEMMS + EMPTY])
def test_small_gemm_kernel(lhs, rhs, out, dims, passes, tmp_path):
    rng = np.random.default_rng(0)
    args = [_random(lhs, rng), _random(rhs, rng)]
    o = run_cases({"case": (_module(lhs, rhs, out, dims), args)}, tmp=tmp_path, passes=passes)["case"]
    got, want = o.got, o.want
    _assert_close(got[0], want[0], _parse(out)[0], f"{lhs} x {rhs}")
    gemms = assert_native_dots(o.artifact)
    assert gemms or passes is None  # without the simplifier every dot is a Gemm thunk


@pytest.mark.parametrize("rhs,dims,whole_rows", [
    ("f32[70,100]{1,0}", LC1_RC0, True),  # a tile's columns are consecutive in rhs
    # rhs contracted over its minor dimension: a tile's columns are 70 elements apart
    ("f32[100,70]{1,0}", "lhs_contracting_dims={1}, rhs_contracting_dims={1}", False),
])
def test_rhs_rows_load_as_vectors_where_contiguous(rhs, dims, whole_rows, tmp_path):
    """A tile reads each step's rhs row as one vector load (ArrayGenerator.run) where the
    columns are contiguous in memory, element by element elsewhere; both compute the dot."""
    rng = np.random.default_rng(5)
    args = [_random("f32[13,70]", rng), _random(rhs, rng)]
    text = _module("f32[13,70]{1,0}", rhs, "f32[13,100]{1,0}", dims)
    o = run_cases({"case": (text, args)}, tmp=tmp_path, passes="layout-assignment")["case"]
    _assert_close(o.got[0], o.want[0], "f32", rhs)
    assert_native_dots(o.artifact)
    ir_text = members(o.artifact)["module.ll"].decode()
    # Accumulators are loaded from typed `<N x float>*` stack slots; operand rows through `ptr`.
    assert bool(re.search(r"load <\d+ x float>, ptr ", ir_text)) == whole_rows


def test_integer_dot_wraps(tmp_path):
    big = np.full((2, 3), 2**30 + 7, np.int32)
    o = run_cases({"case": (_module("s32[2,3]{1,0}", "s32[3,2]{1,0}", "s32[2,2]{1,0}", LC1_RC0), [big, big.T.copy()])}, tmp=tmp_path)["case"]
    got, want = o.got, o.want
    expected = ((big.astype(np.int64) @ big.T.astype(np.int64)) & 0xFFFFFFFF).astype(np.uint32)
    np.testing.assert_array_equal(got[0].view(np.uint32), expected)
    np.testing.assert_array_equal(got[0], want[0])


def test_gemm_kernel_work_counts_multiply_adds(tmp_path):
    text = _module("f32[2,3,5]{2,1,0}", "f32[2,5,7]{2,1,0}", "f32[2,3,7]{2,1,0}",
                   "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                   "rhs_contracting_dims={1}")
    bundle = compile_bundle(text, tmp_path / "m.bundle")
    (name,) = assert_native_dots(bundle)
    assert kernels_json(bundle)["kernels"][name]["work"] == 2 * 3 * 7 * 5


@pytest.mark.parametrize("m,n,k,native", [(32, 256, 31, True), (32, 256, 32, False),
                                           (128, 256, 128, False)])
def test_size_threshold(m, n, k, native, tmp_path):
    """Above SMALL_DOT_WORK, products wider than NARROW_COLUMNS go to the library."""
    assert n > small_dot.NARROW_COLUMNS
    assert (m * n * k < small_dot.SMALL_DOT_WORK) == native
    text = _module(f"f32[{m},{k}]{{1,0}}", f"f32[{k},{n}]{{1,0}}", f"f32[{m},{n}]{{1,0}}", LC1_RC0)
    rng = np.random.default_rng(3)
    args = [_random(f"f32[{m},{k}]", rng), _random(f"f32[{k},{n}]", rng)]
    o = run_cases({"case": (text, args)}, tmp=tmp_path)["case"]
    got, want = o.got, o.want
    _assert_close(got[0], want[0], "f32", f"{m}x{n}x{k}")
    kernels = kernels_json(o.artifact)["kernels"]
    assert any("dot" in k["segments"] for k in kernels.values()) == native


@pytest.mark.parametrize("lhs,rhs,out", [("s8", "s8", "s32"), ("u8", "u8", "u32"),
                                          ("s32", "s32", "s32"), ("s64", "s64", "s64")])
def test_integer_gemms_of_any_size_are_kernels(lhs, rhs, out, tmp_path):
    """No GEMM library takes integer products (an int8 quantized matmul accumulates in int32):
    above the small-dot size too they are tiled kernels, not the reference interpreter on
    the host (which took 7.7 ms where the kernel takes 0.1 ms for 128x256x192)."""
    m, n, k = 96, 80, 160
    assert m * n * k >= small_dot.SMALL_DOT_WORK
    text = _module(f"{lhs}[{m},{k}]{{1,0}}", f"{rhs}[{k},{n}]{{1,0}}", f"{out}[{m},{n}]{{1,0}}",
                   LC1_RC0)
    rng = np.random.default_rng(5)
    args = [_random(f"{lhs}[{m},{k}]", rng), _random(f"{rhs}[{k},{n}]", rng)]
    o = run_cases({"case": (text, args)}, tmp=tmp_path)["case"]
    np.testing.assert_array_equal(o.got[0], o.want[0])
    assert_native_dots(o.artifact)


def test_batches_of_small_products_are_kernels(tmp_path):
    """A batch of many small products (a selective scan's 512 matrix-vector products of 32 x
    16) is one kernel, not 512 library calls, even where the whole is no small dot."""
    lhs, rhs, out = "f32[512,32,16]{2,1,0}", "f32[512,16]{1,0}", "f32[512,32]{1,0}"
    text = _module(lhs, rhs, out, "lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                                  "rhs_batch_dims={0}, rhs_contracting_dims={1}")
    assert 512 * 32 * 16 >= small_dot.SMALL_DOT_WORK
    rng = np.random.default_rng(7)
    o = run_cases({"case": (text, [_random(lhs, rng), _random(rhs, rng)])}, tmp=tmp_path)["case"]
    _assert_close(o.got[0], o.want[0], "f32", out)
    assert assert_native_dots(o.artifact)


@pytest.mark.parametrize("k,n,rhs_layout,native", [
    (16, 8, "{1,0}", True),      # a k-means step's distances to 8 centers
    (64, 128, "{1,0}", True),    # NARROW_COLUMNS
    (64, 256, "{1,0}", False),   # wider: the library's packed GEMM
])
def test_narrow_products_of_any_size_are_kernels(k, n, rhs_layout, native, tmp_path):
    """A product with few result columns read from contiguous rhs rows is a tiled kernel above
    the small-dot size too (dot.narrow_product: 8192 x 16 x 8 took 0.40 of the library
    path's time); wider ones, or ones whose rhs rows are strided, stay with the library."""
    m = 4096
    assert m * n * k >= small_dot.SMALL_DOT_WORK
    assert (n <= small_dot.NARROW_COLUMNS and rhs_layout == "{1,0}") == native
    lhs, rhs, out = f"f32[{m},{k}]{{1,0}}", f"f32[{k},{n}]{rhs_layout}", f"f32[{m},{n}]{{1,0}}"
    rng = np.random.default_rng(8)
    o = run_cases({"case": (_module(lhs, rhs, out, LC1_RC0),
                            [_random(lhs, rng), _random(rhs, rng)])}, tmp=tmp_path)["case"]
    _assert_close(o.got[0], o.want[0], "f32", out)
    kernels = kernels_json(o.artifact)["kernels"]
    assert any(k["segments"] == ["dot"] for k in kernels.values()) == native


def test_narrow_products_need_contiguous_rhs_rows():
    """Column-major rhs rows (no such dot survives dot canonicalization and layout assignment,
    which copy rhs to [k, n] row-major first) would be a strided load per rhs row."""
    def product(layout):
        text = _module("f32[4096,16]{1,0}", f"f32[16,8]{layout}", "f32[4096,8]{1,0}", LC1_RC0)
        return parse_module(text).entry.root

    assert small_dot.narrow_product(product("{1,0}"))
    assert not small_dot.narrow_product(product("{0,1}"))


MATVECS = [
    # m x k times k: k has a tail after the vector steps
    ("f32[37,203]{1,0}", "f32[203]{0}", "f32[37]{0}", LC1_RC0),
    ("f64[12,130]{1,0}", "f64[130,1]{1,0}", "f64[12,1]{1,0}", LC1_RC0),
    ("f32[2,9,70]{2,1,0}", "f32[2,70]{1,0}", "f32[2,9]{1,0}",
     "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"),
    # two contracting dims: the last one is vectorized, the other loops around it
    ("f32[5,3,64]{2,1,0}", "f32[3,64]{1,0}", "f32[5]{0}",
     "lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}"),
]


@pytest.mark.parametrize("lhs,rhs,out,dims", MATVECS)
def test_matrix_vector_products_vectorize_along_k(lhs, rhs, out, dims, tmp_path):
    """A dot with one output column sums each row with vector accumulators along the
    contracting dimension (a matrix-vector product ran 3-4x slower with one lane of each
    column vector busy); the values stay within the dot's rounding."""
    text = _module(lhs, rhs, out, dims)
    rng = np.random.default_rng(6)
    args = [_random(lhs, rng), _random(rhs, rng)]
    o = run_cases({"case": (text, args)}, tmp=tmp_path)["case"]
    _assert_close(o.got[0], o.want[0], _parse(out)[0], out)
    dump = tmp_path / "dump"
    compile_bundle(text, tmp_path / "m.bundle", dump_dir=dump)
    assert b"kv.head" in dumped(dump, "cpu.module.ll")


# ---- dots inside fused kernels ----------------------------------------------------------------

EPILOGUE = """HloModule ep
ENTRY e {
  x = f32[3,5]{1,0} parameter(0)
  w = f32[5,7]{1,0} parameter(1)
  b = f32[7]{0} parameter(2)
  d = f32[3,7]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[3,7]{1,0} broadcast(b), dimensions={1}
  s = f32[3,7]{1,0} add(d, bb)
  ROOT t = f32[3,7]{1,0} tanh(s)
}
"""


def test_fused_epilogue_is_one_kernel(tmp_path):
    rng = np.random.default_rng(4)
    args = [_random("f32[3,5]", rng), _random("f32[5,7]", rng), _random("f32[7]", rng)]
    o = run_cases({"case": (EPILOGUE, args)}, tmp=tmp_path)["case"]
    got, want = o.got, o.want
    _assert_close(got[0], want[0], "f32", "epilogue")
    bundle = o.artifact
    assert not assert_native_dots(bundle)  # the dot sits in the fusion's kernel
    assert " dot(" in members(bundle)["module.hlo"].decode()
    (kernel,) = kernels_json(bundle)["kernels"].values()
    # The dot once, then one pass of the epilogue, whose tanh counts as several operations.
    assert kernel["work"] == 3 * 7 * 5 + 3 * 7 * TRANSCENDENTAL_WORK


BIG_EPILOGUE = EPILOGUE.replace("f32[3,5]", "f32[64,128]").replace("f32[5,7]", "f32[128,96]") \
    .replace("f32[3,7]", "f32[64,96]").replace("f32[7]", "f32[96]")


def test_big_dot_epilogue_stays_a_library_composite(tmp_path):
    rng = np.random.default_rng(7)
    args = [_random("f32[64,128]", rng), _random("f32[128,96]", rng), _random("f32[96]", rng)]
    o = run_cases({"case": (BIG_EPILOGUE, args)}, tmp=tmp_path)["case"]
    got, want = o.got, o.want
    _assert_close(got[0], want[0], "f32", "big epilogue")
    kernels = kernels_json(o.artifact)
    (composite,) = kernels["composites"].values()
    assert [s["kind"] for s in composite["steps"]] == ["gemm", "kernel"]
    assert not any("dot" in k["segments"] for k in kernels["kernels"].values())

# Explicit fusions (XLA's optimized modules carry such), compiled without the fusion passes.
_ADD = "add {\n  p = f32[] parameter(0)\n  q = f32[] parameter(1)\n  ROOT s = f32[] add(p, q)\n}\n"
FUSIONS = {
    # Two dots under one epilogue (a tanh RNN step).
    "two_dots": ("""fc {
  x = f32[3,5]{1,0} parameter(0)
  wx = f32[5,7]{1,0} parameter(1)
  h = f32[3,7]{1,0} parameter(2)
  wh = f32[7,7]{1,0} parameter(3)
  b = f32[7]{0} parameter(4)
  d0 = f32[3,7]{1,0} dot(x, wx), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d1 = f32[3,7]{1,0} dot(h, wh), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[3,7]{1,0} add(d0, d1)
  bb = f32[3,7]{1,0} broadcast(b), dimensions={1}
  sb = f32[3,7]{1,0} add(s, bb)
  ROOT t = f32[3,7]{1,0} tanh(sb)
}""", ["f32[3,5]", "f32[5,7]", "f32[3,7]", "f32[7,7]", "f32[7]"], "f32[3,7]{1,0}"),
    # A dot read transposed and reduced (not at the output's index).
    "transpose_reduce": (_ADD + """fc {
  a = f32[4,6]{1,0} parameter(0)
  b = f32[6,5]{1,0} parameter(1)
  d = f32[4,5]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[5,4]{1,0} transpose(d), dimensions={1,0}
  z = f32[] constant(0)
  ROOT r = f32[5]{0} reduce(t, z), dimensions={1}, to_apply=add
}""", ["f32[4,6]", "f32[6,5]"], "f32[5]{0}"),
    # A dot feeding a dot, transposed operands and a batch dimension.
    "chain": ("""fc {
  a = f32[2,4,6]{2,1,0} parameter(0)
  b = f32[2,5,6]{2,1,0} parameter(1)
  c = f32[5,3]{1,0} parameter(2)
  d = f32[2,4,5]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  ROOT e = f32[2,4,3]{2,1,0} dot(d, c), lhs_contracting_dims={2}, rhs_contracting_dims={0}
}""", ["f32[2,4,6]", "f32[2,5,6]", "f32[5,3]"], "f32[2,4,3]{2,1,0}"),
    # The dot both as an output and under an epilogue (a multi-output fusion).
    "root_and_epilogue": ("""fc {
  a = f32[9,7]{1,0} parameter(0)
  b = f32[7,11]{1,0} parameter(1)
  d = f32[9,11]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[9,11]{1,0} exponential(d)
  ROOT t = (f32[9,11]{1,0}, f32[9,11]{1,0}) tuple(d, e)
}""", ["f32[9,7]", "f32[7,11]"], "(f32[9,11]{1,0}, f32[9,11]{1,0})"),
    # Narrow floats: bf16 products summed in f32, rounded once, then the bf16 epilogue.
    "bf16": ("""fc {
  a = bf16[6,16]{1,0} parameter(0)
  b = bf16[16,10]{1,0} parameter(1)
  c = bf16[6,10]{1,0} parameter(2)
  d = bf16[6,10]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = bf16[6,10]{1,0} multiply(d, c)
}""", ["bf16[6,16]", "bf16[16,10]", "bf16[6,10]"], "bf16[6,10]{1,0}"),
    # Integers wrap; the epilogue sees the wrapped sum.
    "s32": ("""fc {
  a = s32[5,6]{1,0} parameter(0)
  b = s32[6,4]{1,0} parameter(1)
  d = s32[5,4]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = s32[5,4]{1,0} xor(d, d)
}""", ["s32[5,6]", "s32[6,4]"], "s32[5,4]{1,0}"),
}


def _fusion_module(body: str, params: list[str], out: str) -> str:
    args = "\n".join(f"  p{i} = {p}{_layout(p)} parameter({i})" for i, p in enumerate(params))
    call = ", ".join(f"p{i}" for i in range(len(params)))
    return (f"HloModule f\n{body}\nENTRY e {{\n{args}\n"
            f"  ROOT f = {out} fusion({call}), kind=kOutput, calls=fc\n}}\n")


def _layout(shape_text: str) -> str:
    rank = len(_parse(shape_text)[1])
    return "{" + ",".join(str(d) for d in reversed(range(rank))) + "}"


@pytest.mark.parametrize("name", sorted(FUSIONS))
def test_fused_dots(name, tmp_path):
    body, params, out = FUSIONS[name]
    rng = np.random.default_rng(5)
    args = [_random(p, rng) for p in params]
    o = run_cases({"case": (_fusion_module(body, params, out), args)}, tmp=tmp_path, passes="layout-assignment")["case"]
    got, want = o.got, o.want
    dtype = _parse(params[0])[0]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _assert_close(g, w, dtype, f"{name} out{k}")
    bundle = o.artifact
    assert not assert_native_dots(bundle)
    assert list(kernels_json(bundle)["kernels"]) == ["f"]


# ---- loops and samples ------------------------------------------------------------------------

LOOP = """HloModule w
body {
  p = (s32[], f32[4,4]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4,4]{1,0} get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  y = f32[4,4]{1,0} dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[4,4]{1,0} tanh(y)
  ROOT r = (s32[], f32[4,4]{1,0}) tuple(i2, t)
}
cond {
  p = (s32[], f32[4,4]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT c = pred[] compare(i, n), direction=LT
}
ENTRY e {
  x = f32[4,4]{1,0} parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[4,4]{1,0}) tuple(z, x)
  w = (s32[], f32[4,4]{1,0}) while(t), condition=cond, body=body
  ROOT r = f32[4,4]{1,0} get-tuple-element(w), index=1
}
"""


def _loops_in_drivers(bundle) -> None:
    loops = [t["name"] for t in _thunks(json.loads(members(bundle)["thunks.json"])["sequence"])
             if t["kind"] == "while"]
    driven = {name for d in kernels_json(bundle)["drivers"] for name in d["thunks"]}
    assert loops and set(loops) <= driven, (loops, driven)


def test_loop_with_small_dot_runs_in_a_driver(tmp_path):
    x = np.random.default_rng(6).standard_normal((4, 4)).astype(np.float32)
    o = run_cases({"case": (LOOP, [x])}, tmp=tmp_path)["case"]
    got, want = o.got, o.want
    _assert_close(got[0], want[0], "f32", "loop")
    assert_native_dots(o.artifact)
    _loops_in_drivers(o.artifact)


SAMPLES_WITH_SMALL_DOTS = ["scan_rnn", "mlp", "nested_calls", "attention_grad"]


@pytest.mark.parametrize("suffix", [".pb", ".opt.pb"])
@pytest.mark.parametrize("name", SAMPLES_WITH_SMALL_DOTS)
def test_sample_dots_are_native(name, suffix, tmp_path):
    path = SAMPLES / f"{name}{suffix}"
    if not path.exists():
        pytest.skip(f"{path.name} not generated")
    bundle = sample_bundle(path, tmp_path / "s.bundle")
    assert_native_dots(bundle)
    if name == "scan_rnn":
        _loops_in_drivers(bundle)
    got = load_cpu(bundle).run(sample_arrays(name, "inputs"))
    expected = sample_arrays(name, "expected")
    outputs = sample_meta(name)["outputs"]
    problems = [f"out{i}: {why}" for i, (g, e, d) in enumerate(zip(got, expected, outputs,
                                                                    strict=True))
                if (why := mismatch(g, e, d)) is not None]
    assert not problems, "; ".join(problems)


# ---- tiles of a buffered dot, compact kernels -------------------------------------------------

# Dots computed into the kernel's stack buffer ahead of their epilogue, with row and column
# counts that leave the last block of each short: that block is a whole tile moved back over
# the one before it (TileEmitter.emit's overlap), so the kernel has the contracting loops of
# one tile shape (several where the target's registers take a tile's columns in passes:
# paired products on AVX2), as many as the same dot without tails.
# (element type, m, k, n): tails of rows and columns; one column (vectors along k); f64,
# bf16; s8 products in pairs (pmaddwd) into s32.
OVERLAPPED = [("f32", 19, 37, 64), ("f32", 13, 9, 20), ("f32", 29, 33, 1), ("f64", 11, 6, 7),
              ("bf16", 9, 16, 10), ("s8", 11, 6, 70)]


def _buffered_dot(et: str, m: int, k: int, n: int) -> tuple[str, list[str]]:
    acc = "s32" if et == "s8" else et
    epilogue = "xor" if acc == "s32" else "add"
    return (f"""HloModule b
ENTRY e {{
  x = {et}[{m},{k}]{{1,0}} parameter(0)
  w = {et}[{k},{n}]{{1,0}} parameter(1)
  c = {acc}[{m},{n}]{{1,0}} parameter(2)
  d = {acc}[{m},{n}]{{1,0}} dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT s = {acc}[{m},{n}]{{1,0}} {epilogue}(d, c)
}}
""", [f"{et}[{m},{k}]", f"{et}[{k},{n}]", f"{acc}[{m},{n}]"])


_CONTRACTING_LOOP = re.compile(r"^(k|k2|kv)\.head(\.\d+)?:", re.M)


@pytest.mark.parametrize("et,m,k,n", OVERLAPPED, ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}"
                                                      for c in OVERLAPPED])
def test_buffered_dot_tails_overlap(et, m, k, n, tmp_path):
    text, params = _buffered_dot(et, m, k, n)
    args = [_random(p, np.random.default_rng(m * n + k)) for p in params]
    o = run_cases({"case": (text, args)}, tmp=tmp_path)["case"]
    _assert_close(o.got[0], o.want[0], params[2].split("[")[0], f"{et} {m}x{k}x{n}")
    assert not assert_native_dots(o.artifact)  # the dot sits in the epilogue's kernel
    tiling = small_dot.tiling_of(next(i for i in parse_module(text).entry.post_order()
                                      if i.opcode == Opcode.DOT))
    assert m % tiling.rows or n % tiling.cols  # a block falls short
    whole, _ = _buffered_dot(et, 2 * tiling.rows if m % tiling.rows else m, k,
                             2 * tiling.cols if n % tiling.cols else n)
    one_shape = compile_bundle(whole, tmp_path / "whole.bundle")
    loops, want = (_CONTRACTING_LOOP.findall(members(b)["module.ll"].decode())
                   for b in (o.artifact, one_shape))
    assert len(loops) == len(want), (loops, want)


_CONV = """HloModule c
ENTRY e {
  x = f32[1,8,8,3]{3,2,1,0} parameter(0)
  w = f32[3,3,3,4]{3,2,1,0} parameter(1)
  ROOT c = f32[1,6,6,4]{3,2,1,0} convolution(x, w), window={size=3x3}, dim_labels=b01f_01io->b01f
}
"""
_BIG_MAP = """HloModule m
ENTRY e {
  x = f32[512,512]{1,0} parameter(0)
  ROOT t = f32[512,512]{1,0} tanh(x)
}
"""


@pytest.mark.parametrize("name,text,params,small,compact", [
    ("small_dot", EPILOGUE, ["f32[3,5]", "f32[5,7]", "f32[7]"], True, True),
    ("mlp_layer", *_buffered_dot("f32", 19, 37, 64), True, True),
    ("small_conv", _CONV, ["f32[1,8,8,3]", "f32[3,3,3,4]"], True, False),
    ("big_map", _BIG_MAP, ["f32[512,512]"], False, False),
])
def test_compact_kernels_are_not_unrolled(name, text, params, small, compact, tmp_path):
    """A kernel below COMPACT_KERNEL_WORK asks LLVM not to unroll its loops, unless it has a
    window (a convolution's taps run 2-3x faster unrolled); bigger kernels leave it to LLVM.
    Either way the results are the interpreter's."""
    from hloc.codegen.cpu.compile import COMPACT_KERNEL_WORK

    args = [_random(p, np.random.default_rng(9)) for p in params]
    o = run_cases({"case": (text, args)}, tmp=tmp_path)["case"]
    _assert_close(o.got[0], o.want[0], "f32", name)
    kernels = kernels_json(o.artifact)["kernels"]
    assert kernels
    assert all((k["work"] < COMPACT_KERNEL_WORK) == small for k in kernels.values()), kernels
    ir_text = members(o.artifact)["module.ll"].decode()
    assert ("llvm.loop.unroll.disable" in ir_text) == compact
