"""Golden tests for multi-output (sibling) fusion."""

from __future__ import annotations

import pytest

from hloc.ir import Opcode
from hloc.passes.fusion.cost import fusion_count, kernel_count

from .support.golden import golden
from .support.hlo import fused_ops

pytestmark = pytest.mark.pure

TWO_REDUCTIONS = """
HloModule moments
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[8,16] parameter(0)
  zero = f32[] constant(0)
  s1 = f32[8] reduce(x, zero), dimensions={1}, to_apply=add_f32
  sq = f32[8,16] multiply(x, x)
  s2 = f32[8] reduce(sq, zero), dimensions={1}, to_apply=add_f32
  ROOT t = (f32[8], f32[8]) tuple(s1, s2)
}
"""


def test_sibling_reductions_share_one_input_fusion():
    module, _ = golden(TWO_REDUCTIONS, "fusion,multi-output-fusion", """
        CHECK: %fused_computation
        CHECK-DAG: reduce(%param_0
        CHECK-DAG: multiply(%_, %_)
        CHECK: ROOT %_ = (f32[8]{0}, f32[8]{0}) tuple(
        CHECK: ENTRY
        CHECK: %_ = (f32[8]{0}, f32[8]{0}) fusion(%x), kind=kInput
        CHECK-DAG: get-tuple-element(%_), index=0
        CHECK-DAG: get-tuple-element(%_), index=1
    """)
    assert (fusion_count(module), kernel_count(module)) == (1, 1)


def test_without_the_pass_there_are_two_kernels():
    module, _ = golden(TWO_REDUCTIONS, "fusion")
    assert kernel_count(module) == 2


def test_loop_siblings_of_one_shape_merge():
    module, _ = golden("""
HloModule siblings
ENTRY e {
  x = f32[32] parameter(0)
  a = f32[32] exponential(x)
  b = f32[32] sine(x)
  c = f32[32] negate(x)
  ROOT t = (f32[32], f32[32], f32[32]) tuple(a, b, c)
}
""", "fusion,multi-output-fusion")
    assert kernel_count(module) == 1
    assert sorted(fused_ops(module)[0]) == ["exponential", "negate", "sine", "tuple"]


def test_siblings_of_different_shapes_do_not_merge():
    module, _ = golden("""
HloModule shapes
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[8,16] parameter(0)
  zero = f32[] constant(0)
  rows = f32[8] reduce(x, zero), dimensions={1}, to_apply=add_f32
  cols = f32[16] reduce(x, zero), dimensions={0}, to_apply=add_f32
  n = f32[8,16] negate(x)
  ROOT t = (f32[8], f32[16], f32[8,16]) tuple(rows, cols, n)
}
""", "fusion,multi-output-fusion")
    assert kernel_count(module) == 3


def test_dependent_siblings_do_not_merge():
    # b reads x and (through the barrier c) a: one fusion computing both would be a cycle.
    module, _ = golden("""
HloModule dependent
ENTRY e {
  x = f32[16] parameter(0)
  a = f32[16] exponential(x)
  c = f32[16] opt-barrier(a)
  b = f32[16] add(x, c)
  ROOT t = (f32[16], f32[16]) tuple(a, b)
}
""", "fusion,multi-output-fusion")
    whole = [ops for ops in fused_ops(module) if "exponential" in ops and "add" in ops]
    assert not whole


def test_output_fusions_are_left_alone():
    module, _ = golden("""
HloModule outs
ENTRY e {
  x = f32[4,6] parameter(0)
  w = f32[6,4] parameter(1)
  d = f32[4,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  r = f32[4,4] negate(d)
  nx = f32[4,6] negate(x)
  v = f32[4,6] exponential(nx)
  ROOT t = (f32[4,4], f32[4,6]) tuple(r, v)
}
""", "fusion,multi-output-fusion")
    kinds = sorted(i.attrs.fusion_kind for i in module.entry.instructions
                   if i.opcode == Opcode.FUSION)
    assert kinds == ["kLoop", "kOutput"]


def test_max_ops_limits_merging():
    module, _ = golden("""
HloModule siblings
ENTRY e {
  x = f32[32] parameter(0)
  a = f32[32] exponential(x)
  b = f32[32] sine(x)
  ROOT t = (f32[32], f32[32]) tuple(a, b)
}
""", "fusion,multi-output-fusion{max-ops=1}")
    assert kernel_count(module) == 2
