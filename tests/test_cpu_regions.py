"""Loop nests split into index regions (codegen/elemental/regions.py, codegen/cpu/loops.py):
where a concatenate or pad changes what an element reads, each region's loop reads one
operand with affine loads instead of a per-element choice that LLVM vectorized as gathers."""

from __future__ import annotations

import re

import numpy as np
import pytest

from hloc.codegen.elemental.regions import regions, split_points
from hloc.ir.text.parser import parse_module

from .support.bundles import members
from .support.hlo import reducer_text
from .support.run import compare_with_interpreter, run_cases

pytestmark = pytest.mark.cpu

# jnp.roll by one along both axes, as JAX lowers it: a heat-equation step.
ROLL = """HloModule roll
ENTRY e {{
  u = f32[{n},{m}]{{1,0}} parameter(0)
  up0 = f32[1,{m}]{{1,0}} slice(u), slice={{[{n1}:{n}], [0:{m}]}}
  up1 = f32[{n1},{m}]{{1,0}} slice(u), slice={{[0:{n1}], [0:{m}]}}
  up = f32[{n},{m}]{{1,0}} concatenate(up0, up1), dimensions={{0}}
  dn0 = f32[{n1},{m}]{{1,0}} slice(u), slice={{[1:{n}], [0:{m}]}}
  dn1 = f32[1,{m}]{{1,0}} slice(u), slice={{[0:1], [0:{m}]}}
  dn = f32[{n},{m}]{{1,0}} concatenate(dn0, dn1), dimensions={{0}}
  lf0 = f32[{n},1]{{1,0}} slice(u), slice={{[0:{n}], [{m1}:{m}]}}
  lf1 = f32[{n},{m1}]{{1,0}} slice(u), slice={{[0:{n}], [0:{m1}]}}
  lf = f32[{n},{m}]{{1,0}} concatenate(lf0, lf1), dimensions={{1}}
  rt0 = f32[{n},{m1}]{{1,0}} slice(u), slice={{[0:{n}], [1:{m}]}}
  rt1 = f32[{n},1]{{1,0}} slice(u), slice={{[0:{n}], [0:1]}}
  rt = f32[{n},{m}]{{1,0}} concatenate(rt0, rt1), dimensions={{1}}
  a = f32[{n},{m}]{{1,0}} add(up, dn)
  b = f32[{n},{m}]{{1,0}} add(lf, rt)
  ROOT s = f32[{n},{m}]{{1,0}} add(a, b)
}}
"""


def _roll(n: int, m: int) -> str:
    return ROLL.format(n=n, m=m, n1=n - 1, m1=m - 1)


def _kernel(ir_text: str) -> str:
    match = re.search(r"define [^\n]*@hloc_\w+\(.*?\n}", ir_text, re.S)
    assert match
    return match.group(0)


def test_split_points_follow_slices_reverses_and_broadcasts():
    module = parse_module("""HloModule p
ENTRY e {
  x = f32[10,6]{1,0} parameter(0)
  a = f32[3,6]{1,0} slice(x), slice={[0:3], [0:6]}
  b = f32[7,6]{1,0} slice(x), slice={[3:10], [0:6]}
  c = f32[10,6]{1,0} concatenate(b, a), dimensions={0}
  r = f32[10,6]{1,0} reverse(c), dimensions={0}
  s = f32[8,6]{1,0} slice(r), slice={[2:10], [0:6]}
  z = f32[] constant(0)
  p = f32[8,9]{1,0} pad(s, z), padding=0_0x2_1
  t = f32[9,8]{0,1} transpose(p), dimensions={1,0}
  ROOT o = f32[4,9,8]{2,1,0} broadcast(t), dimensions={1,2}
}
""")
    points = split_points([module.entry.root], 3)
    # s's row k is r's row k + 2, which is c's row 7 - k: c's part `a` (rows 7-9) for k = 0,
    # part `b` from k = 1 on.
    assert regions(points[2], 8) == [(0, 1), (1, 8)]
    # p's columns 2..7 read s (padding low 2, high 1): t's rows 2 and 8.
    assert regions(points[1], 9) == [(0, 2), (2, 8), (8, 9)]
    assert regions(points[0], 4) == [(0, 4)]
    assert regions({1, 8, 0, 12}, 9) == [(0, 1), (1, 8), (8, 9)]


@pytest.mark.parametrize("cpu", ["", "x86-64-v3"])
def test_a_roll_stencil_has_no_gathers_and_matches(cpu, tmp_path):
    """A 128 x 128 roll stencil: 13.5 us a step with two gathers per vector (a select between
    two rows' pointers and one between two columns), 4 us split into 3 x 3 regions."""
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((128, 128)).astype(np.float32)]
    options = {"cpu": cpu} if cpu else {}
    o = run_cases({"roll": (_roll(128, 128), args)}, tmp=tmp_path, **options)["roll"]
    np.testing.assert_array_equal(o.got[0], o.want[0])
    kernel = _kernel(members(o.artifact)["module.opt.ll"].decode())
    assert "masked.gather" not in kernel, kernel[:3000]
    assert re.search(r"<\d+ x float>", kernel)  # vectorized at all, at the target's width


PAD_STENCIL = """HloModule padst
ENTRY e {
  x = f32[64,200]{1,0} parameter(0)
  z = f32[] constant(0)
  p = f32[66,202]{1,0} pad(x, z), padding=1_1x1_1
  w = f32[64,200]{1,0} slice(p), slice={[0:64], [0:200]}
  n = f32[64,200]{1,0} slice(p), slice={[2:66], [2:202]}
  c = f32[64,200]{1,0} slice(p), slice={[1:65], [1:201]}
  s = f32[64,200]{1,0} add(w, n)
  ROOT o = f32[64,200]{1,0} subtract(s, c)
}
"""


def test_a_zero_padded_stencil_has_no_gathers(tmp_path):
    """Reads of a padded array at shifted indices: in the inner region the operand index is
    affine and unclamped, so the loads are contiguous."""
    rng = np.random.default_rng(6)
    args = [rng.standard_normal((64, 200)).astype(np.float32)]
    o = run_cases({"pad": (PAD_STENCIL, args)}, tmp=tmp_path)["pad"]
    np.testing.assert_array_equal(o.got[0], o.want[0])
    kernel = _kernel(members(o.artifact)["module.opt.ll"].decode())
    assert "masked.gather" not in kernel, kernel[:3000]


# Region boundaries at every position that can go wrong: first and last element, both sides
# of a block boundary (rows longer than loops.BLOCK), reversed operands (scale -1), more
# regions than MAX_REGIONS, padding with negative and interior edges, and 3-D transposes.
CASES = {
    "roll_small": (_roll(3, 5), [(3, 5)]),
    "roll_rows_of_one": (_roll(7, 2), [(7, 2)]),
    "roll_long_rows": (_roll(2, 20000), [(2, 20000)]),
    "reverse_concat": ("""HloModule rc
ENTRY e {
  x = f32[9,13]{1,0} parameter(0)
  y = f32[9,4]{1,0} parameter(1)
  c = f32[9,17]{1,0} concatenate(x, y), dimensions={1}
  r = f32[9,17]{1,0} reverse(c), dimensions={0,1}
  d = f32[9,17]{1,0} concatenate(y, x), dimensions={1}
  ROOT o = f32[9,17]{1,0} multiply(r, d)
}
""", [(9, 13), (9, 4)]),
    "many_parts": ("""HloModule mp
ENTRY e {
  x = f32[6,3]{1,0} parameter(0)
  ROOT c = f32[6,30]{1,0} concatenate(x, x, x, x, x, x, x, x, x, x), dimensions={1}
}
""", [(6, 3)]),
    "many_parts_both_axes": ("""HloModule mb
ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  r = f32[2,12]{1,0} concatenate(x, x, x, x), dimensions={1}
  ROOT c = f32[10,12]{1,0} concatenate(r, r, r, r, r), dimensions={0}
}
""", [(2, 3)]),
    "pad_edges": ("""HloModule pe
ENTRY e {
  x = f32[11,9]{1,0} parameter(0)
  v = f32[] parameter(1)
  p = f32[12,13]{1,0} pad(x, v), padding=-2_3x1_3
  q = f32[12,13]{1,0} pad(x, v), padding=3_-2x-4_0_1
  ROOT o = f32[12,13]{1,0} add(p, q)
}
""", [(11, 9), ()]),
    "transposed_3d": ("""HloModule t3
ENTRY e {
  x = f32[5,6,7]{2,1,0} parameter(0)
  a = f32[2,6,7]{2,1,0} slice(x), slice={[3:5], [0:6], [0:7]}
  b = f32[3,6,7]{2,1,0} slice(x), slice={[0:3], [0:6], [0:7]}
  c = f32[5,6,7]{2,1,0} concatenate(a, b), dimensions={0}
  t = f32[7,6,5]{0,1,2} transpose(c), dimensions={2,1,0}
  one = f32[] constant(1)
  p = f32[7,6,9]{2,1,0} pad(t, one), padding=0_0x0_0x3_1
  ROOT o = f32[7,6,9]{0,2,1} copy(p)
}
""", [(5, 6, 7)]),
    "pools": ("HloModule pl\n" + reducer_text("maximum", name="mx") + reducer_text("add", name="sm")
              + """ENTRY e {
  x = f32[37,41]{1,0} parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  a = f32[19,41]{1,0} reduce-window(x, ninf), window={size=5x3 stride=2x1 pad=2_2x1_1}, to_apply=mx
  b = f32[19,41]{1,0} reduce-window(x, zero), window={size=3x5 stride=2x1 pad=1_1x4_0 rhs_dilate=1x1}, to_apply=sm
  ROOT o = f32[19,41]{1,0} add(a, b)
}
""", [(37, 41)]),
    "int_rows": ("""HloModule ir
ENTRY e {
  x = s32[4,33]{1,0} parameter(0)
  a = s32[4,1]{1,0} slice(x), slice={[0:4], [32:33]}
  b = s32[4,32]{1,0} slice(x), slice={[0:4], [0:32]}
  c = s32[4,33]{1,0} concatenate(a, b), dimensions={1}
  ROOT o = s32[4,33]{1,0} xor(c, x)
}
""", [(4, 33)]),
}


@pytest.mark.parametrize("backend", ["cpu-kernels", "cpu"])
def test_region_boundaries_match_the_interpreter(backend, tmp_path):
    rng = np.random.default_rng(7)
    cases = {}
    for name, (text, shapes) in CASES.items():
        dtype = np.int32 if "s32" in text else np.float32
        args = [rng.integers(-1000, 1000, s).astype(dtype) if dtype == np.int32
                else rng.standard_normal(s).astype(dtype) for s in shapes]
        cases[name] = (text, args)
    compare_with_interpreter(cases, backend, tmp=tmp_path)


POOL = "HloModule pool\n" + reducer_text("maximum", name="mx") + """ENTRY e {
  a = f32[128,128]{1,0} parameter(0)
  ninf = f32[] constant(-inf)
  ROOT p = f32[128,128]{1,0} reduce-window(a, ninf), window={size=3x3 pad=1_1x1_1}, to_apply=mx
}
"""


@pytest.mark.parametrize("cpu", ["", "x86-64-v3"])
def test_a_padded_pool_interior_reads_without_gathers(cpu, tmp_path):
    """Windows that reach padding start and stop at the edges: the loop nest splits there,
    and inside, every tap reads the operand (no test, no clamp), unrolled and vectorized
    with contiguous loads; a clamped tap position made every load a gather (13 of them)."""
    args = [np.random.default_rng(8).standard_normal((128, 128)).astype(np.float32)]
    options = {"cpu": cpu} if cpu else {}
    o = run_cases({"pool": (POOL, args)}, tmp=tmp_path, **options)["pool"]
    np.testing.assert_array_equal(o.got[0], o.want[0])
    kernel = _kernel(members(o.artifact)["module.opt.ll"].decode())
    assert "masked.gather" not in kernel, kernel[:3000]
    assert re.search(r"<\d+ x float>", kernel)
