"""Column reductions under elementwise roots (hloc/codegen/cpu/reduce.py plan_epilogue): a
logsumexp down the rows, with the log and the max added back after the sum, runs as one
column-reduce segment whose blocks of sums go through the root's operations; against the
reference interpreter, whole and in parts, and the roots that keep their loop."""

from __future__ import annotations

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
