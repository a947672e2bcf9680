"""Kernels over short rows (codegen/cpu/loops.py ROW_VECTOR_MIN): LLVM's loop vectorizer stays
off the unit loop, whose units lie a row apart, so a row's unrolled elements become
contiguous vector loads and stores instead of gathers and scatters."""

from __future__ import annotations

import re

import numpy as np
import pytest

from .support.bundles import members
from .support.hlo import arg_reducer_text, reducer_text
from .support.run import run_cases

pytestmark = pytest.mark.cpu

ROWS = """HloModule rows
ENTRY e {{
  a = f32[{n},{n}]{{1,0}} parameter(0)
  b = f32[{m},{n}]{{1,0}} parameter(1)
  ba = f32[{m},{n},{n}]{{2,1,0}} broadcast(a), dimensions={{1,2}}
  bb = f32[{m},{n},{n}]{{2,1,0}} broadcast(b), dimensions={{0,2}}
  ROOT s = f32[{m},{n},{n}]{{2,1,0}} add(ba, bb)
}}
"""


def _kernel(ir_text: str, symbol: str) -> str:
    match = re.search(rf"define [^\n]*@{symbol}\(.*?\n}}", ir_text, re.S)
    assert match, symbol
    return match.group(0)


@pytest.mark.parametrize("row", [16, 4])
def test_short_rows_are_vectorized_within_the_row(row, tmp_path):
    """An HMM step's broadcast add (8 x 16 rows of 16) took 3.6 us with a gather per load and
    a scatter per store; rows shorter than ROW_VECTOR_MIN keep vectorizing across units."""
    # 512 rows: enough work for LLVM's full pipeline (a few thousand elements get a light
    # one without vectorizers, codegen/llvm.py), where the gathers appeared.
    text = ROWS.format(m=512, n=row)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((row, row)).astype(np.float32),
            rng.standard_normal((512, row)).astype(np.float32)]
    o = run_cases({"case": (text, args)}, tmp=tmp_path)["case"]
    np.testing.assert_array_equal(o.got[0], o.want[0])
    files = members(o.artifact)
    raw, optimized = files["module.ll"].decode(), files["module.opt.ll"].decode()
    kernel = _kernel(optimized, r"hloc_\w+")
    off = "llvm.loop.vectorize.enable" in raw
    assert off == (row >= 8)
    if row >= 8:
        assert "masked.gather" not in kernel and "masked.scatter" not in kernel, kernel[:2000]


LSE = """ENTRY e {{
  x = f32[{m},{n}]{{1,0}} parameter(0)
  t = f32[{n},16]{{1,0}} parameter(1)
  bx = f32[{m},{n},16]{{2,1,0}} broadcast(x), dimensions={{0,1}}
  bt = f32[{m},{n},16]{{2,1,0}} broadcast(t), dimensions={{1,2}}
  s = f32[{m},{n},16]{{2,1,0}} add(bx, bt)
  p = f32[{m},{n},16]{{2,1,0}} exponential(s)
  z = f32[] constant(0)
  r = f32[{m},16]{{1,0}} reduce(p, z), dimensions={{1}}, to_apply=sum
  ROOT l = f32[{m},16]{{1,0}} log(r)
}}
"""


@pytest.mark.parametrize("n", [16, 32])
def test_short_reductions_unroll_so_the_output_row_vectorizes(n, tmp_path):
    """A log-sum-exp over 16 states inside an elementwise kernel (an HMM step): unrolled
    (reduction.SHORT_REDUCE), the output row is the vectorized loop, with contiguous loads of
    `t`'s rows; left rolled, LLVM vectorized the reduction itself, gathering `t`'s columns.
    Longer reductions (over 32 here) stay loops."""
    text = "HloModule lse\n" + reducer_text("add", name="sum") + LSE.format(m=512, n=n)
    rng = np.random.default_rng(4)
    args = [rng.standard_normal((512, n)).astype(np.float32),
            rng.standard_normal((n, 16)).astype(np.float32)]
    o = run_cases({"case": (text, args)}, tmp=tmp_path)["case"]
    np.testing.assert_allclose(o.got[0], o.want[0], rtol=2e-6, atol=0)
    files = members(o.artifact)
    raw, optimized = files["module.ll"].decode(), files["module.opt.ll"].decode()
    kernel = _kernel(optimized, r"hloc_\w+")
    assert ("llvm.loop.unroll.full" in raw) == (n == 16)
    if n == 16:
        assert "masked.gather" not in kernel, kernel[:2000]


COLUMN_MAX = """HloModule colmax
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[512,16]{1,0} parameter(0)
  t = f32[16,16]{1,0} parameter(1)
  bx = f32[512,16,16]{2,1,0} broadcast(x), dimensions={0,1}
  bt = f32[512,16,16]{2,1,0} broadcast(t), dimensions={1,2}
  s = f32[512,16,16]{2,1,0} add(bx, bt)
  z = f32[] constant(-inf)
  ROOT r = f32[512,16]{1,0} reduce(s, z), dimensions={1}, to_apply=max
}
"""


def test_column_reductions_never_vectorize_across_the_reduced_rows(tmp_path):
    """A column reduction (codegen/cpu/reduce.py) over 16-element rows: LLVM unrolled the
    row and then vectorized the loop over the reduced rows, gathering; now it may not."""
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((512, 16)).astype(np.float32),
            rng.standard_normal((16, 16)).astype(np.float32)]
    o = run_cases({"case": (COLUMN_MAX, args)}, tmp=tmp_path)["case"]
    np.testing.assert_array_equal(o.got[0], o.want[0])
    kernel = _kernel(members(o.artifact)["module.opt.ll"].decode(), r"hloc_\w+")
    assert "masked.gather" not in kernel, kernel[:2000]


WINDOW_SUM = """ENTRY e {{
  x = bf16[128,256]{{1,0}} parameter(0)
  z = bf16[] constant(0)
  ROOT r = bf16[{rows},256]{{1,0}} reduce-window(x, z), window={{size=32x{cols} stride=32x1 pad=0_0x{pad}}}, to_apply=add
}}
"""


@pytest.mark.parametrize("cols,pad,unrolled", [(1, "0_0", True), (3, "1_1", False)])
def test_short_windows_unroll_where_the_row_stays_inside(cols, pad, unrolled, tmp_path):
    """A bf16 sum over windows of 32 rows (XLA's tree reduction of a bias gradient): the tap
    loop unrolls (reduction.SHORT_WINDOW) and the output row vectorizes with contiguous loads;
    rolled, LLVM vectorized the taps, a gather each (6.5 ns an element, now 0.3). A window
    padded along the row keeps its loop: a clamped position would be a gather per tap."""
    rows = 128 // 32
    text = ("HloModule wsum\n" + reducer_text("add", "bf16", name="add")
            + WINDOW_SUM.format(rows=rows, cols=cols, pad=pad))
    rng = np.random.default_rng(6)
    import ml_dtypes

    args = [rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)]
    o = run_cases({"case": (text, args)}, tmp=tmp_path)["case"]
    np.testing.assert_array_equal(o.got[0], o.want[0])
    files = members(o.artifact)
    raw, optimized = files["module.ll"].decode(), files["module.opt.ll"].decode()
    assert ("llvm.loop.unroll.full" in raw) == unrolled
    if unrolled:
        kernel = _kernel(optimized, r"hloc_\w+")
        assert "masked.gather" not in kernel, kernel[:2000]


ARGMIN_ROWS = """
ENTRY e {{
  x = f32[512,{n}]{{1,0}} parameter(0)
  io = s32[512,{n}]{{1,0}} iota(), iota_dimension=1
  inf = f32[] constant(inf)
  z = s32[] constant(0)
  r = (f32[512], s32[512]) reduce(x, io, inf, z), dimensions={{1}}, to_apply=argmin
  v = f32[512] get-tuple-element(r), index=0
  i = s32[512] get-tuple-element(r), index=1
  ROOT o = (f32[512], s32[512]) tuple(v, i)
}}
"""


@pytest.mark.parametrize("n", [32, 33])
def test_short_argmins_unroll_so_the_output_row_vectorizes(n, tmp_path):
    """An argmin over rows of up to 32 (reduction.SHORT_VARIADIC_REDUCE; k-means' assignment
    step) unrolls so that lanes hold neighbouring rows: each row's compare-and-select chain
    was one long dependency. Ties keep the lowest index, a NaN wins, as in the reducer."""
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, (512, n)).astype(np.float32)  # many ties
    x[rng.random((512, n)) < 0.01] = np.nan
    text = "HloModule argmin\n" + arg_reducer_text("argmin") + ARGMIN_ROWS.format(n=n)
    o = run_cases({"case": (text, [x])}, tmp=tmp_path)["case"]
    np.testing.assert_array_equal(o.got[1], o.want[1])
    np.testing.assert_array_equal(o.got[0], o.want[0])
    raw = members(o.artifact)["module.ll"].decode()
    assert ("llvm.loop.unroll.full" in raw) == (n <= 32)
