"""Reductions, windows, map, dot, in-place update and scatter kernels vs the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.codegen.cpu import KernelSpec
from hloc.ir.text.parser import parse_module

from .support.hlo import reducer_text as reducer
from .support.kernels import Compiled, check_hlo, reference
from .support.values import assert_matches, random_inputs

pytestmark = pytest.mark.cpu

ADD_F32 = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
"""


def reduce_module(op, t, shape, dims, init, layout=""):
    out = [n for i, n in enumerate(shape) if i not in dims]
    sh = ",".join(map(str, shape))
    return f"""HloModule m
{reducer(op, t)}
ENTRY e {{
  a = {t}[{sh}]{layout} parameter(0)
  z = {t}[] constant({init})
  ROOT r = {t}[{",".join(map(str, out))}] reduce(a, z), dimensions={{{",".join(map(str, dims))}}}, to_apply=r_{op}_{t}
}}
"""


CASES = [
    ("add", "f32", (37, 129), (1,), 0, 1e-5),
    ("add", "f32", (129, 37), (0,), 0, 1e-5),
    ("add", "f32", (5, 6, 7), (0, 2), 0, 1e-5),
    ("add", "f32", (300,), (0,), 0, 1e-5),
    ("add", "f64", (40, 33), (0, 1), 0, 1e-12),
    # Narrow floats round to their type after every step, in order (the tree-reduction pass,
    # not run on these bare kernels, keeps longer ones to windows of 32): exact.
    ("add", "bf16", (16, 32), (1,), 0, 0),
    ("add", "bf16", (32, 16), (0,), 0, 0),
    ("add", "f16", (8, 24), (1,), 0, 0),
    ("maximum", "f32", (33, 65), (1,), "-inf", 0),
    ("maximum", "f32", (65, 33), (0,), "-inf", 0),
    ("minimum", "f16", (17, 40), (0,), "inf", 0),
    ("multiply", "f32", (9, 10), (1,), 1, 1e-5),
    ("add", "s32", (70, 90), (0,), 0, 0),
    ("add", "s32", (70, 90), (1,), 0, 0),
    ("maximum", "u8", (30, 40), (1,), 0, 0),
    ("minimum", "s64", (30, 40), (0,), 0, 0),
    ("and", "pred", (12, 13), (1,), "true", 0),
    ("or", "pred", (12, 13), (0,), "false", 0),
    ("add", "f32", (0, 5), (0,), 0, 0),
    ("add", "f32", (4, 0), (1,), 0, 0),
    ("add", "f32", (1, 5), (0,), 0, 0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{c[3]}")
@pytest.mark.parametrize("chunks", [1, 4])
def test_reduce(case, chunks):
    op, t, shape, dims, init, tol = case
    check_hlo(reduce_module(op, t, shape, dims, init), rtol=tol, atol=tol, chunks=chunks)


def test_reduce_column_layout():
    # Input in column-major layout: dim 0 is contiguous, reducing dim 1 is the column form.
    check_hlo(reduce_module("add", "f32", (64, 48), (1,), 0, layout="{0,1}"), rtol=1e-5,
              atol=1e-5)


def test_reduce_with_nan_and_signed_zero():
    text = reduce_module("maximum", "f32", (4, 3), (0,), "-inf")
    a = np.array([[-0.0, 1, np.nan], [0.0, -2, 3], [-0.0, -5, 4], [-1, 7, 1]], np.float32)
    check_hlo(text, [a])
    check_hlo(reduce_module("minimum", "f32", (4, 3), (1,), "inf"), [a])


ARGMAX = """HloModule m
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  nan = pred[] compare(v0, v0), direction=NE
  pick0 = pred[] or(gt, nan)
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  first = pred[] or(pick0, tie)
  v = f32[] select(first, v0, v1)
  i = s32[] select(first, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  a = f32[DIMS] parameter(0)
  io = s32[DIMS] iota(), iota_dimension=AXIS
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[OUT], s32[OUT]) reduce(a, io, ninf, zero), dimensions={AXIS}, to_apply=argmax
}
"""


@pytest.mark.parametrize("axis", [0, 1])
def test_variadic_argmax(axis):
    text = ARGMAX.replace("DIMS", "23,41").replace("AXIS", str(axis)).replace(
        "OUT", "41" if axis == 0 else "23")
    a = np.random.default_rng(0).integers(0, 5, (23, 41)).astype(np.float32)
    a[3, 7] = np.nan
    check_hlo(text, [a])


REDUCE_WINDOW = """HloModule m
""" + reducer("maximum", "f32") + reducer("add", "f32") + """
ENTRY e {
  a = f32[2,9,11,3] parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  mx = f32[2,5,5,3] reduce-window(a, ninf), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x0_0x0_0}, to_apply=r_maximum_f32
  sm = f32[2,16,9,3] reduce-window(a, zero), window={size=1x2x3x1 lhs_dilate=1x2x1x1 pad=0_0x0_0x1_1x0_0 rhs_dilate=1x1x2x1}, to_apply=r_add_f32
  ROOT t = (f32[2,5,5,3], f32[2,16,9,3]) tuple(mx, sm)
}
"""


def test_reduce_window():
    check_hlo(REDUCE_WINDOW, rtol=1e-6, atol=1e-6, chunks=3)


# Windows that reach padding loop over their own taps inside the operand only (reduction.py
# _tap_bounds): a cumulative window (every output's bounds differ), SAME pooling with
# strides, windows wholly in padding (no tap: the init value), and padding on one side of a
# long row (not unrolled), next to a dilated window, which keeps its per-tap test.
PADDED_WINDOWS = """HloModule m
""" + reducer("maximum", "f32") + reducer("add", "s32") + reducer("minimum", "s32") + """
ENTRY e {
  a = f32[40,37] parameter(0)
  i = s32[3,100] parameter(1)
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  big = s32[] constant(2147483647)
  cum = s32[3,100] reduce-window(i, zero), window={size=1x100 pad=0_0x99_0}, to_apply=r_add_s32
  cmin = s32[3,100] reduce-window(i, big), window={size=1x16 pad=0_0x15_0}, to_apply=r_minimum_s32
  pool = f32[20,13] reduce-window(a, ninf), window={size=7x9 stride=2x3 pad=3_3x4_4}, to_apply=r_maximum_f32
  holes = f32[10,6] reduce-window(a, ninf), window={size=3x2 stride=6x9 pad=10_10x8_8}, to_apply=r_maximum_f32
  dil = f32[36,36] reduce-window(a, ninf), window={size=3x2 pad=1_1x1_1 rhs_dilate=3x3}, to_apply=r_maximum_f32
  ROOT t = (s32[3,100], s32[3,100], f32[20,13], f32[10,6], f32[36,36]) tuple(cum, cmin, pool, holes, dil)
}
"""


@pytest.mark.parametrize("chunks", [1, 4])
def test_windows_reaching_padding_run_their_inside_taps(chunks):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((40, 37)).astype(np.float32)
    i = rng.integers(-1000, 1000, (3, 100)).astype(np.int32)
    check_hlo(PADDED_WINDOWS, [a, i], chunks=chunks)


def test_reduce_inside_loop_fusion():
    text = """HloModule m
""" + ADD_F32 + """
ENTRY e {
  one = f32[] constant(1)
  ones = f32[19]{0} broadcast(one), dimensions={}
  a = f32[19,10]{1,0} parameter(0)
  z = f32[] constant(0)
  s = f32[19]{0} reduce(a, z), dimensions={1}, to_apply=add
  ROOT d = f32[19]{0} divide(ones, s)
}"""
    check_hlo(text, rtol=1e-5)


def test_multi_output_reduce_and_elementwise():
    text = """HloModule m
""" + ADD_F32 + """
ENTRY e {
  a = f32[64,32] parameter(0)
  sq = f32[64,32] multiply(a, a)
  z = f32[] constant(0)
  s = f32[32] reduce(sq, z), dimensions={0}, to_apply=add
  s2 = f32[64] reduce(a, z), dimensions={1}, to_apply=add
  ROOT t = (f32[32], f32[64], f32[64,32]) tuple(s, s2, sq)
}"""
    check_hlo(text, rtol=1e-5, atol=1e-5, chunks=5)


def test_map_and_dot():
    text = """HloModule m
mapped {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  m = f32[] multiply(x, y)
  ROOT s = f32[] add(m, x)
}
ENTRY e {
  a = f32[6,7] parameter(0)
  b = f32[7,5] parameter(1)
  c = f32[6,7] map(a, a), dimensions={0,1}, to_apply=mapped
  d = f32[6,5] dot(c, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  i = s32[6,7] convert(a)
  j = s32[7,5] convert(b)
  k = s32[6,5] dot(i, j), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[6,5], s32[6,5]) tuple(d, k)
}"""
    check_hlo(text, rtol=1e-5, atol=1e-5)


def test_batched_dot():
    text = """HloModule m
ENTRY e {
  a = bf16[3,4,6] parameter(0)
  b = bf16[3,6,5] parameter(1)
  ROOT d = bf16[3,4,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}"""
    check_hlo(text, rtol=1e-2, atol=1e-2)


DUS = """HloModule m
ENTRY e {
  a = f32[16,12] parameter(0)
  u = f32[5,12] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  c1 = f32[] constant(1)
  one = f32[5,12] broadcast(c1), dimensions={}
  upd = f32[5,12] add(u, one)
  ROOT d = f32[16,12] dynamic-update-slice(a, upd, i, z)
}"""


@pytest.mark.parametrize("start", [-3, 4, 14])
def test_in_place_dynamic_update_slice(start):
    module = parse_module(DUS)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((16, 12)).astype(np.float32)
    u = rng.standard_normal((5, 12)).astype(np.float32)
    inputs = [a, u, np.array(start, np.int32)]
    want = reference(module.entry, inputs)[0]
    comp = module.entry
    spec = KernelSpec("dus", comp, ("d",), tuple(p.shape for p in comp.parameters),
                      (comp.root.shape,), aliases=((0, 0),))
    compiled = Compiled([spec])
    assert compiled.emitted.metadata.kernels["dus"].segments == ("in-place-update",)
    assert compiled.emitted.metadata.kernels["dus"].parallel_extent == 5
    got = compiled.loaded.run(spec, [a.copy(), u, inputs[2]], chunks=2)[0]
    assert_matches(got, want)
    # Without the alias the same computation is a full elemental loop.
    check_hlo(DUS, inputs)


SCATTER = """HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  a = f32[10,4] parameter(0)
  i = s32[6,1] parameter(1)
  u = f32[6,4] parameter(2)
  ROOT s = f32[10,4] scatter(a, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}"""


@pytest.mark.parametrize("aliased", [False, True])
def test_scatter(aliased):
    module = parse_module(SCATTER)
    comp = module.entry
    rng = np.random.default_rng(4)
    a = rng.standard_normal((10, 4)).astype(np.float32)
    idx = np.array([[1], [3], [1], [-1], [9], [10]], np.int32)
    u = rng.standard_normal((6, 4)).astype(np.float32)
    want = reference(comp, [a, idx, u])[0]
    spec = KernelSpec("sc", comp, ("s",), tuple(p.shape for p in comp.parameters),
                      (comp.root.shape,), aliases=((0, 0),) if aliased else ())
    got = Compiled([spec]).loaded.run(spec, [a.copy(), idx, u])[0]
    assert_matches(got, want, rtol=1e-6)


def test_scatter_2d_window_and_replace():
    text = """HloModule m
replace {
  x = s32[] parameter(0)
  ROOT y = s32[] parameter(1)
}
ENTRY e {
  a = s32[6,7] parameter(0)
  i = s64[3,2] parameter(1)
  u = s32[3,2,3] parameter(2)
  ROOT s = s32[6,7] scatter(a, i, u), update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=replace
}"""
    module = parse_module(text)
    inputs = random_inputs(module.entry, 3)
    inputs[1] = np.array([[0, 0], [4, 4], [5, 1]], np.int64)
    check_hlo(text, inputs)


SOFTMAX_DIVIDE = """HloModule m
ENTRY e {
  e = f32[3,4,8,64]{3,2,1,0} parameter(0)
  s = f32[3,4,8]{2,1,0} parameter(1)
  b = f32[3,4,8,64]{3,2,1,0} broadcast(s), dimensions={0,1,2}
  d = f32[3,4,8,64]{3,2,1,0} divide(e, b)
  ROOT r = f32[12,8,64]{2,1,0} reshape(d)
}"""


def test_in_place_elementwise_through_a_reshape_vectorizes():
    # The output shares operand 0's buffer ([12, 8, 64] over [3, 4, 8, 64], as attention's
    # softmax division): both addresses must reach one expression (memory.linear_offset),
    # else LLVM guards the vector loop with an overlap check that an exact overlap fails.
    module = parse_module(SOFTMAX_DIVIDE)
    comp = module.entry
    spec = KernelSpec("sd", comp, ("d",), tuple(p.shape for p in comp.parameters),
                      (comp.root.shape,), aliases=((0, 0),))
    compiled = Compiled([spec])
    body = compiled.emitted.metadata.optimized_ir
    assert "fdiv <" in body and "fdiv float" not in body and "diff.check" not in body
    rng = np.random.default_rng(6)
    e = rng.standard_normal((3, 4, 8, 64)).astype(np.float32)
    s = rng.uniform(1, 2, (3, 4, 8)).astype(np.float32)
    want = reference(comp, [e, s])[0]
    buffer = e.copy()  # operand 0 and the output: one buffer
    for lo, hi in ((0, 50), (50, compiled.emitted.metadata.kernels["sd"].parallel_extent)):
        compiled.loaded.call("sd", [buffer, s, buffer], lo, hi)
    assert_matches(buffer.reshape(12, 8, 64), want)
