"""Every GPU kernel variant, run under emulation against the reference interpreter."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from .support.bundles import variants
from .support.run import emulate_hlo
from .support.values import assert_close, random_array

pytestmark = pytest.mark.cpu
RNG = np.random.default_rng(7)

ADD = "add {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y)\n}\n"
MAX = "mx {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] maximum(x, y)\n}\n"
ADDI = "addi {\n x = s32[] parameter(0)\n y = s32[] parameter(1)\n ROOT s = s32[] add(x, y)\n}\n"


def check(text, inputs, expect, **tol):
    got, want, ex = emulate_hlo(text, inputs)
    assert_close(got, want, **tol)
    used = variants(ex)
    for v in expect:
        assert used[v] > 0, f"variant {v} not used: {dict(used)}"
    return ex


@pytest.mark.parametrize("n,variant_params", [(1000, 1), (1 << 18, 4)])
def test_loop_kernel(n, variant_params):
    text = f"""HloModule m
ENTRY e {{
  a = f32[{n}] parameter(0)
  b = f32[{n}] parameter(1)
  m = f32[{n}] multiply(a, b)
  ROOT r = f32[{n}] add(m, a)
}}"""
    ex = check(text, [random_array(n, "f32", RNG), random_array(n, "f32", RNG)], ["loop"])
    assert dict(ex.program.kernels[0].params)["unroll"] == variant_params


def test_row_reduce_block_with_non_identity_init():
    text = f"""HloModule m
{ADD}
ENTRY e {{
  a = f32[4,3000] parameter(0)
  z = f32[] constant(1.5)
  ROOT r = f32[4] reduce(a, z), dimensions={{1}}, to_apply=add
}}"""
    check(text, [random_array((4, 3000), "f32", RNG)], ["row-reduce.block"], rtol=1e-4)


def test_row_reduce_warp_max():
    text = f"""HloModule m
{MAX}
ENTRY e {{
  a = f32[300,40] parameter(0)
  z = f32[] constant(-inf)
  ROOT r = f32[300] reduce(a, z), dimensions={{1}}, to_apply=mx
}}"""
    check(text, [random_array((300, 40), "f32", RNG)], ["row-reduce.warp"])


def test_variadic_argmax_rows():
    text = """HloModule m
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  pick = pred[] or(gt, tie)
  v = f32[] select(pick, v0, v1)
  i = s32[] select(pick, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  a = f32[37,700] parameter(0)
  io = s32[37,700] iota(), iota_dimension=1
  z = f32[] constant(-inf)
  zi = s32[] constant(0)
  ROOT r = (f32[37], s32[37]) reduce(a, io, z, zi), dimensions={1}, to_apply=argmax
}"""
    x = np.round(random_array((37, 700), "f32", RNG))  # many ties
    check(text, [x], ["row-reduce.block"])


@pytest.mark.parametrize("shape,dims,out", [((500, 70), (0,), (70,)), ((6, 50, 33), (1,), (6, 33)),
                                            ((40, 3, 65), (0, 1), (65,))])
def test_column_reduce(shape, dims, out):
    sh = ",".join(map(str, shape))
    text = f"""HloModule m
{ADDI}
ENTRY e {{
  a = s32[{sh}] parameter(0)
  z = s32[] constant(3)
  ROOT r = s32[{",".join(map(str, out))}] reduce(a, z), dimensions={{{",".join(map(str, dims))}}}, to_apply=addi
}}"""
    check(text, [random_array(shape, "i4", RNG)], ["column-reduce"])


def test_reduce_with_elementwise_epilogue():
    text = f"""HloModule m
{ADD}
ENTRY e {{
  a = f32[64,500] parameter(0)
  z = f32[] constant(0)
  r = f32[64] reduce(a, z), dimensions={{1}}, to_apply=add
  n = f32[] constant(500)
  nb = f32[64] broadcast(n), dimensions={{}}
  ROOT d = f32[64] divide(r, nb)
}}"""
    ex = check(text, [random_array((64, 500), "f32", RNG)], ["row-reduce.warp"], rtol=1e-4)
    assert all(r.variant != "loop" for r in ex.program.kernels)


@pytest.mark.parametrize("shape,perm,dtype", [((100, 70), (1, 0), "f32"),
                                              ((8, 40, 50), (0, 2, 1), "f32"),
                                              ((64, 33), (1, 0), "pred")])
def test_transpose_tiled(shape, perm, dtype):
    out = [shape[p] for p in perm]
    text = f"""HloModule m
ENTRY e {{
  a = {dtype}[{",".join(map(str, shape))}] parameter(0)
  ROOT t = {dtype}[{",".join(map(str, out))}] transpose(a), dimensions={{{",".join(map(str, perm))}}}
}}"""
    np_dtype = {"f32": "f32", "pred": "bool"}[dtype]
    check(text, [random_array(shape, np_dtype, RNG)], ["transpose.tiled"])


@pytest.mark.parametrize("m,k,n,batch,dtype", [(70, 50, 90, 0, "f32"), (33, 40, 20, 3, "f32"),
                                               (64, 64, 64, 0, "s32"), (40, 24, 72, 0, "bf16")])
def test_gemm_tiled(m, k, n, batch, dtype):
    b = f"{batch}," if batch else ""
    dn = "lhs_batch_dims={0}, rhs_batch_dims={0}, " if batch else ""
    c = 2 if batch else 1
    out_t = "f32" if dtype == "bf16" else dtype
    text = f"""HloModule m
ENTRY e {{
  a = {dtype}[{b}{m},{k}] parameter(0)
  w = {dtype}[{b}{k},{n}] parameter(1)
  ROOT d = {out_t}[{b}{m},{n}] dot(a, w), {dn}lhs_contracting_dims={{{c}}}, rhs_contracting_dims={{{c - 1}}}
}}"""
    shape_a = ((batch,) if batch else ()) + (m, k)
    shape_w = ((batch,) if batch else ()) + (k, n)
    np_t = {"f32": "f32", "s32": "i4", "bf16": "f32"}[dtype]
    a, w = random_array(shape_a, np_t, RNG), random_array(shape_w, np_t, RNG)
    if dtype == "bf16":
        a, w = a.astype(ml_dtypes.bfloat16), w.astype(ml_dtypes.bfloat16)
    check(text, [a, w], ["gemm.tiled"], rtol=1e-4, atol=1e-4)


def test_gemm_with_bias_relu_epilogue():
    text = """HloModule m
ENTRY e {
  a = f32[48,80] parameter(0)
  w = f32[80,96] parameter(1)
  bias = f32[96] parameter(2)
  d = f32[48,96] dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[48,96] broadcast(bias), dimensions={1}
  s = f32[48,96] add(d, bb)
  z = f32[] constant(0)
  zb = f32[48,96] broadcast(z), dimensions={}
  ROOT r = f32[48,96] maximum(s, zb)
}"""
    ins = [random_array(s, "f32", RNG) for s in ((48, 80), (80, 96), (96,))]
    # A dot of parameters cuBLAS can run: the dot alone, then the epilogue in place.
    ex = check(text, ins, ["gemm.tiled", "loop"], rtol=1e-4, atol=1e-4)
    assert len(ex.program.kernels) == 2
    # An epilogue that changes the type (the dot's values do not fit the output): it stays
    # in the GEMM kernel.
    fused = text.replace("ROOT r = f32[48,96] maximum(s, zb)",
                         "m = f32[48,96] maximum(s, zb)\n  ROOT r = f16[48,96] convert(m)")
    ex = check(fused, ins, ["gemm.tiled"], rtol=1e-3, atol=1e-3)
    assert len(ex.program.kernels) == 1


def test_grouped_dilated_convolution():
    text = """HloModule m
ENTRY e {
  x = f32[2,6,11,9] parameter(0)
  w = f32[3,3,3,4] parameter(1)
  ROOT c = f32[2,4,6,4] convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x2_1 rhs_dilate=1x2}, dim_labels=bf01_01io->bf01, feature_group_count=2
}"""
    ins = [random_array((2, 6, 11, 9), "f32", RNG), random_array((3, 3, 3, 4), "f32", RNG)]
    check(text, ins, ["loop"], rtol=1e-4, atol=1e-4)


SORT_CMP = """cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
"""


@pytest.mark.parametrize("n,variant", [(300, "sort.bitonic"), (2500, "sort.merge"),
                                       (4097, "sort.merge")])
def test_stable_variadic_sort(n, variant):
    text = f"""HloModule m
{SORT_CMP}
ENTRY e {{
  k = f32[3,{n}] parameter(0)
  v = s32[3,{n}] parameter(1)
  ROOT s = (f32[3,{n}], s32[3,{n}]) sort(k, v), dimensions={{1}}, is_stable=true, to_apply=cmp
}}"""
    keys = np.round(random_array((3, n), "f32", RNG))  # many equal keys
    vals = np.arange(3 * n, dtype=np.int32).reshape(3, n)
    check(text, [keys, vals], [variant])


@pytest.mark.parametrize("dtype,np_dtype", [("f16", "float16"), ("s8", "int8"), ("pred", "bool"),
                                            ("f64", "float64"), ("u32", "uint32")])
def test_merge_sort_keys_of_every_width_along_a_major_dim(dtype, np_dtype):
    """Rows longer than the bitonic kernel takes, sorted along dim 0 (not minor in memory),
    descending, keys of 1, 8, 16, 32 and 64 bits stored in records, positions breaking ties
    (5,000 = 13 merge passes, the last run unpaired)."""
    n = 5000
    text = f"""HloModule m
cmp {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT gt = pred[] compare(a, b), direction=GT
}}
ENTRY e {{
  k = {dtype}[{n},2] parameter(0)
  v = s32[{n},2] parameter(1)
  ROOT s = ({dtype}[{n},2], s32[{n},2]) sort(k, v), dimensions={{0}}, is_stable=true, to_apply=cmp
}}"""
    keys = random_array((n, 2), np_dtype, RNG)
    if dtype == "f16":
        keys = np.round(keys * 4).astype(np.float16)  # ties
    vals = np.arange(2 * n, dtype=np.int32).reshape(n, 2)
    check(text, [keys, vals], ["sort.merge"])


def _topk(dtype: str, rows: int, n: int, k: int, largest: str = "true") -> str:
    return f"""HloModule m
ENTRY e {{
  a = {dtype}[{rows},{n}] parameter(0)
  ROOT t = ({dtype}[{rows},{k}], s32[{rows},{k}]) topk(a), k={k}, largest={largest}
}}"""


def test_topk_with_nans_and_ties():
    text = _topk("f32", 5, 40, 7)
    x = np.round(random_array((5, 40), "f32", RNG))
    x[1, 3] = np.nan
    x[2, :] = 1.0
    check(text, [x], ["topk.rank"])


@pytest.mark.parametrize("order", ["random", "ascending", "descending", "equal", "strided"])
@pytest.mark.parametrize("n,k,variant", [(600, 1, "topk.rank"), (600, 10, "topk.rank"),
                                         (600, 600, "topk.rank"), (3000, 1, "topk.block"),
                                         (3000, 10, "topk.block"), (3000, 2, "topk.block"),
                                         (1100, 24, "topk.block")])
def test_topk_long_rows(order, n, k, variant):
    """Rows in every order, k from 1 to the whole row, largest and smallest: rows of 600 on
    topk.rank (the thread of an element stops once k beat it, scanning from its right-hand
    neighbour round), longer ones on topk.block (each thread's best k of every 256th
    element, then the block's candidates ranked in shared memory)."""
    x = random_array((4, n), "f32", RNG)
    if order != "random":
        x = np.sort(x, axis=1)
        x = x[:, ::-1].copy() if order == "descending" else x
    if order == "equal":
        x[:] = 2.0
    if order == "strided":  # the best and the worst of the row in topk.block's first thread
        x[:, ::256] = RNG.permutation(np.r_[np.arange(100, 100 + n // 512 + 1),
                                            -np.arange(100, 100 + (n + 255) // 256
                                                       - n // 512 - 1)])
    for largest in ("true", "false"):
        check(_topk("f32", 4, n, k, largest), [x], [variant])


def test_topk_of_a_long_pred_row_ranks():
    """pred values have no byte-sized register type for topk.block's shared candidates."""
    check(_topk("pred", 2, 1100, 3), [RNG.random((2, 1100)) < 0.01], ["topk.rank"])


def _scatter(combiner: str, extra: str = "") -> str:
    return f"""HloModule m
comb {{
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT r = f32[] {combiner}
}}
ENTRY e {{
  op = f32[50,8] parameter(0)
  idx = s32[30,1] parameter(1)
  upd = f32[30,8] parameter(2)
  ROOT s = f32[50,8] scatter(op, idx, upd), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=comb{extra}
}}"""


@pytest.mark.parametrize("combiner,extra,variant,unique", [
    ("add(x, y)", "", "scatter.atomic", False),
    ("multiply(x, y)", "", "scatter.serial", False),
    ("copy(y)", "", "scatter.serial", False),
    ("maximum(x, y)", ", unique_indices=true", "scatter.parallel", True)])
def test_scatter_variants(combiner, extra, variant, unique):
    idx = (RNG.permutation(52)[:30] - 1 if unique else RNG.integers(-2, 52, 30))
    ins = [random_array((50, 8), "f32", RNG), idx.astype(np.int32).reshape(30, 1),
           random_array((30, 8), "f32", RNG)]
    check(_scatter(combiner, extra), ins, [variant], rtol=1e-5)


@pytest.mark.parametrize("dtype,np_dtype", [("f32", "float32"), ("f64", "float64"),
                                            ("s32", "int32"), ("u32", "uint32")])
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_scatter_max_min_atomics_with_collisions(op, dtype, np_dtype):
    """Max and min scatters with many updates per element run as atomics (integer atomics,
    floats by compare-and-swap), NaN propagating, and match a sequential scatter."""
    text = f"""HloModule m
comb {{
  x = {dtype}[] parameter(0)
  y = {dtype}[] parameter(1)
  ROOT r = {dtype}[] {op}(x, y)
}}
ENTRY e {{
  o = {dtype}[6,16] parameter(0)
  idx = s32[500,1] parameter(1)
  upd = {dtype}[500,16] parameter(2)
  ROOT s = {dtype}[6,16] scatter(o, idx, upd), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=comb
}}"""
    upd = (RNG.standard_normal((500, 16)) * 1000).astype(np_dtype)
    if dtype[0] == "f":
        upd[7, 3] = upd[300, 3] = np.nan  # element (idx[7], 3) becomes NaN
    idx = RNG.integers(-1, 7, (500, 1)).astype(np.int32)  # -1 and 6 skipped
    idx[7] = 2
    ins = [(RNG.standard_normal((6, 16)) * 1000).astype(np_dtype), idx, upd]
    got, want, ex = emulate_hlo(text, ins)
    assert_close(got, want)
    assert variants(ex)["scatter.atomic"] > 0
    if dtype[0] == "f":
        assert np.isnan(got[0][2, 3])


def test_dynamic_update_slice_in_place_in_a_loop():
    text = """HloModule m
body {
  p = (s32[], f32[64,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  buf = f32[64,16] get-tuple-element(p), index=1
  f = f32[] convert(i)
  row = f32[1,16] broadcast(f), dimensions={}
  z = s32[] constant(0)
  upd = f32[64,16] dynamic-update-slice(buf, row, i, z)
  one = s32[] constant(1)
  n = s32[] add(i, one)
  ROOT t = (s32[], f32[64,16]) tuple(n, upd)
}
cond {
  p = (s32[], f32[64,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  lim = s32[] constant(64)
  ROOT lt = pred[] compare(i, lim), direction=LT
}
ENTRY e {
  x = f32[64,16] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[64,16]) tuple(z, x)
  w = (s32[], f32[64,16]) while(t), condition=cond, body=body
  ROOT r = f32[64,16] get-tuple-element(w), index=1
}"""
    check(text, [random_array((64, 16), "f32", RNG)], ["dus.inplace"])


def test_select_and_scatter_max_pool_gradient():
    text = """HloModule m
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT g = pred[] compare(a, b), direction=GE
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[1,9,9,2] parameter(0)
  s = f32[1,4,4,2] parameter(1)
  z = f32[] constant(0)
  ROOT r = f32[1,9,9,2] select-and-scatter(x, s, z), window={size=1x3x3x1 stride=1x2x2x1}, select=ge, scatter=add
}"""
    ins = [np.round(random_array((1, 9, 9, 2), "f32", RNG)), random_array((1, 4, 4, 2), "f32", RNG)]
    check(text, ins, ["loop"])
