"""Column reductions under elementwise roots (hloc/codegen/cpu/reduce.py plan_epilogue): a
logsumexp down the rows, with the log and the max added back after the sum, runs as one
column-reduce segment whose blocks of sums go through the root's operations; against the
reference interpreter, whole and in parts, and the roots that keep their loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hloc.codegen.cpu.kernel import plan_segments
from hloc.ir.text.parser import parse_module

from .support import kernels
from .support.hlo import reducer_text

pytestmark = pytest.mark.cpu

LSE = """ENTRY e {{
  x = f32[{n},{m}]{{1,0}} parameter(0)
  mx = f32[{m}]{{0}} parameter(1)
  w = f32[{m}]{{0}} parameter(2)
  b = f32[{n},{m}]{{1,0}} broadcast(mx), dimensions={{1}}
  d = f32[{n},{m}]{{1,0}} subtract(x, b)
  e = f32[{n},{m}]{{1,0}} exponential(d)
  z = f32[] constant(0)
  s = f32[{m}]{{0}} reduce(e, z), dimensions={{0}}, to_apply=add
  l = f32[{m}]{{0}} log(s)
  a = f32[{m}]{{0}} add(l, mx)
  ROOT r = f32[{m}]{{0}} {root}
}}
"""


def _module(n, m, root="multiply(a, w)"):
    return parse_module("HloModule lse\n" + reducer_text("add", name="add")
                        + LSE.format(n=n, m=m, root=root))


@pytest.mark.parametrize("n,m", [(256, 256), (17, 300), (33, 5)])
def test_logsumexp_down_the_rows_is_one_column_sweep(n, m):
    module = _module(n, m)
    spec = kernels.entry_spec(module, "lse")
    assert [s.kind for s in plan_segments(spec)] == ["column-reduce"]
    rng = np.random.default_rng(n * m)
    args = [rng.standard_normal((n, m)).astype(np.float32),
            rng.standard_normal(m).astype(np.float32), rng.standard_normal(m).astype(np.float32)]
    want = kernels.reference(module.entry, args)[0]
    compiled = kernels.Compiled([spec])
    for chunks in (1, 3):
        got = compiled.run("lse", args, chunks=chunks)[0]
        np.testing.assert_allclose(got, want, rtol=3e-6, atol=1e-6)


@pytest.mark.parametrize("root", [
    "multiply(s, w)",  # the reduce is needed whole: the operands' other reduce below
    "reduce(e, z), dimensions={0}, to_apply=add",  # a plain column reduce: its own planner
])
def test_other_roots_keep_their_segments(root):
    kinds = [s.kind for s in plan_segments(kernels.entry_spec(_module(40, 64, root), "k"))]
    assert kinds == ["column-reduce"]


def test_short_reductions_keep_the_loop_that_unrolls_them():
    kinds = [s.kind for s in plan_segments(kernels.entry_spec(_module(16, 64), "k"))]
    assert kinds == ["loop"]


def test_a_root_that_reads_the_sums_at_other_positions_keeps_its_loop():
    """A reverse of the sums: output j reads sum m-1-j, which another block may hold."""
    text = ("HloModule rev\n" + reducer_text("add", name="add") + LSE.format(
        n=40, m=64, root="add(a, w)").replace(
        "  ROOT r = f32[64]{0} add(a, w)",
        "  v = f32[64]{0} reverse(a), dimensions={0}\n  ROOT r = f32[64]{0} add(v, w)"))
    module = parse_module(text)
    assert [s.kind for s in plan_segments(kernels.entry_spec(module, "k"))] == ["loop"]


COLUMN_SUM = """ENTRY e {{
  x = {t}[{shape}]{{{layout}}} parameter(0)
  z = {t}[] constant(0)
  ROOT r = {t}[{out}]{{0}} reduce(x, z), dimensions={{{dims}}}, to_apply=add
}}
"""


def _sequential_sum(x: np.ndarray) -> np.ndarray:
    """Row after row into one accumulator per column, rounding like the array's dtype."""
    acc = np.zeros(x.shape[-1], x.dtype)
    for row in x.reshape(-1, x.shape[-1]):
        acc = acc + row
    return acc


@pytest.mark.parametrize("shape,dims,t", [
    ((4096, 768), "0", "f32"),  # a layer norm's bias gradient: 64-row chunks
    ((64, 96, 256), "0,1", "f32"),  # two reduced dimensions, one flattened row index
    ((20000, 3), "0", "f32"),  # a narrow block: 1024-row chunks of its vectorized rows
    ((5000, 200), "0", "f64"),
])
def test_long_column_sums_add_partial_sums(shape, dims, t, tmp_path):
    """A long float column sum adds 64 rows (1024 for narrow blocks) at a time into partial
    sums: closer to the exact sums than one accumulator per column (XLA's library order
    is close to pairwise; hloc's one running sum down 4096 rows was 20 x further from the
    exact ones), and at least as close as the f32 sequential sum everywhere."""
    from .support.run import run_cases

    dtype = np.float32 if t == "f32" else np.float64
    rng = np.random.default_rng(len(shape) * shape[-1])
    x = (rng.standard_normal(shape) + 0.5).astype(dtype)
    text = ("HloModule colsum\n" + reducer_text("add", t, name="add") + COLUMN_SUM.format(
        t=t, shape=",".join(map(str, shape)), out=shape[-1], dims=dims,
        layout=",".join(str(d) for d in reversed(range(len(shape))))))
    got = run_cases({"sum": (text, [x])}, tmp=tmp_path)["sum"].got[0]
    exact = x.astype(np.float64).reshape(-1, shape[-1]).sum(0) if t == "f32" else \
        np.array([math.fsum(c) for c in x.reshape(-1, shape[-1]).T])
    err = np.abs(got - exact).max()
    sequential = np.abs(_sequential_sum(x) - exact).max()
    assert err < sequential / 3, (err, sequential)


ROW_SUM = """ENTRY e {{
  x = {t}[{shape}]{{{layout}}} parameter(0)
  z = {t}[] constant(0)
  ROOT r = {t}[{out}] reduce(x, z), dimensions={{{dims}}}, to_apply=add
}}
"""


@pytest.mark.parametrize("shape,dims,out,t,bound", [
    ((1 << 22,), "0", "", "f32", 0.5),  # a whole-array sum (0.81 ulp before)
    ((256, 65536), "0,1", "", "f32", 1),  # a mean's sum, over two dimensions (73 before)
    ((8, 100000), "1", "8", "f64", 3),  # row sums (4 before)
])
def test_long_contiguous_sums_cascade(shape, dims, out, t, bound, tmp_path):
    """A float sum along a contiguous dimension longer than reduction.SUM_CHUNK runs as a
    cascade of chunk sums, close to the exact sum (one running sum per vector lane was up to
    73 ulp off, for the 16M values of a mean)."""
    from .support.run import run_cases

    dtype = np.float32 if t == "f32" else np.float64
    rng = np.random.default_rng(shape[-1])
    x = (rng.standard_normal(shape) + 0.5).astype(dtype)
    layout = ",".join(str(d) for d in reversed(range(len(shape))))
    text = ("HloModule rowsum\n" + reducer_text("add", t, name="add") + ROW_SUM.format(
        t=t, shape=",".join(map(str, shape)), out=out, dims=dims, layout=layout))
    got = np.asarray(run_cases({"sum": (text, [x])}, tmp=tmp_path)["sum"].got[0])
    if out:
        exact = np.array([math.fsum(row) for row in x.reshape(-1, x.shape[-1])])
    else:
        exact = np.array(math.fsum(x.ravel().tolist()))
    ulps = np.abs(got - exact) / np.spacing(np.abs(exact).astype(dtype))
    assert ulps.max() <= bound, ulps.max()
