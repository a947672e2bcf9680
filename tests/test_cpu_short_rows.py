"""Kernels over short rows (codegen/cpu/loops.py ROW_VECTOR_MIN): LLVM's loop vectorizer stays
off the unit loop, whose units lie a row apart, so a row's unrolled elements become
contiguous vector loads and stores instead of gathers and scatters."""

from __future__ import annotations

import re

import numpy as np
import pytest

from .support.bundles import members
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
