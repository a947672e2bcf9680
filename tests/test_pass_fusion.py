"""Golden tests for instruction fusion (loop, input/reduction and output fusion).

Each case: HLO text → pass spec (verifier after every pass) → FileCheck-style checks on the
printed module, and the reference interpreter must give bit-identical results before and after
on random inputs. `golden` is shared with the other pass test files of this family.
"""

from __future__ import annotations

import re

import pytest

from hloc.ir import Opcode
from hloc.ir.text.parser import parse_module
from hloc.ir.text.printer import print_module
from hloc.passes.fusion.cost import fusion_count, kernel_count

from .support.golden import golden
from .support.hlo import fused_ops, run_passes

pytestmark = pytest.mark.pure


CHAIN = """
HloModule chain
ENTRY e {
  x = f32[8,4] parameter(0)
  y = f32[8,4] parameter(1)
  a = f32[8,4] add(x, y)
  n = f32[8,4] negate(a)
  c = f32[] constant(2)
  b = f32[8,4] broadcast(c), dimensions={}
  m = f32[8,4] multiply(n, b)
  ROOT t = f32[8,4] tanh(m)
}
"""


def test_elementwise_chain_becomes_one_loop_fusion():
    module, _ = golden(CHAIN, "fusion", """
        CHECK: %fused_computation
        CHECK: add(
        CHECK: negate(
        CHECK: broadcast(
        CHECK: multiply(
        CHECK: ROOT %_ = f32[8,4]{1,0} tanh(
        CHECK: ENTRY
        CHECK-NOT: add(
        CHECK: ROOT %_ = f32[8,4]{1,0} fusion(%x, %y), kind=kLoop, calls=%fused_computation
    """)
    assert fusion_count(module) == 1 and kernel_count(module) == 1


def test_expensive_producer_with_two_users_is_not_duplicated():
    module, printed = golden("""
HloModule shared_exp
ENTRY e {
  x = f32[16] parameter(0)
  ex = f32[16] exponential(x)
  one = f32[] constant(1)
  ones = f32[16] broadcast(one), dimensions={}
  a = f32[16] add(ex, ones)
  m = f32[16] multiply(ex, ex)
  ROOT t = (f32[16], f32[16]) tuple(a, m)
}
""", "fusion")
    assert printed.count("exponential(") == 1
    assert Opcode.EXP in {i.opcode for i in module.entry.instructions}


def test_cheap_producer_is_duplicated_into_each_consumer():
    module, printed = golden("""
HloModule shared_bcast
ENTRY e {
  x = f32[6,2] parameter(0)
  v = f32[2] parameter(1)
  bv = f32[6,2] broadcast(v), dimensions={1}
  a = f32[6,2] add(x, bv)
  s = f32[6,2] subtract(x, bv)
  ea = f32[6,2] exponential(a)
  es = f32[6,2] exponential(s)
  ROOT t = (f32[6,2], f32[6,2]) tuple(ea, es)
}
""", "fusion")
    assert fusion_count(module) == 2
    assert all("broadcast" in ops for ops in fused_ops(module))
    assert Opcode.BROADCAST not in {i.opcode for i in module.entry.instructions}


def test_no_duplication_when_disabled():
    module, _ = golden("""
HloModule shared_bcast
ENTRY e {
  x = f32[6,2] parameter(0)
  v = f32[2] parameter(1)
  bv = f32[6,2] broadcast(v), dimensions={1}
  a = f32[6,2] add(x, bv)
  s = f32[6,2] subtract(x, bv)
  ROOT t = (f32[6,2], f32[6,2]) tuple(a, s)
}
""", "fusion{duplicate=0}")
    assert Opcode.BROADCAST in {i.opcode for i in module.entry.instructions}


def test_expensive_producer_is_not_fused_below_a_broadcast():
    # exp(v) would be recomputed for every one of the 8 rows of the broadcast.
    module, _ = golden("""
HloModule reuse
ENTRY e {
  v = f32[4] parameter(0)
  x = f32[8,4] parameter(1)
  ev = f32[4] exponential(v)
  b = f32[8,4] broadcast(ev), dimensions={1}
  ROOT s = f32[8,4] add(x, b)
}
""", "fusion", """
        CHECK: %fused_computation
        CHECK-NOT: exponential
        CHECK: ENTRY
        CHECK: exponential(%v)
        CHECK: fusion(
    """)
    assert fusion_count(module) == 1


DOT_EPILOGUE = """
HloModule dense
ENTRY e {
  x = f32[4,6] parameter(0)
  w = f32[6,3] parameter(1)
  b = f32[3] parameter(2)
  d = f32[4,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[4,3] broadcast(b), dimensions={1}
  s = f32[4,3] add(d, bb)
  z = f32[] constant(0)
  zb = f32[4,3] broadcast(z), dimensions={}
  ROOT r = f32[4,3] maximum(s, zb)
}
"""


def test_dot_with_a_second_user_stays_a_plain_dot():
    module, _ = golden("""
HloModule dense2
ENTRY e {
  x = f32[4,6] parameter(0)
  w = f32[6,3] parameter(1)
  d = f32[4,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  n = f32[4,3] negate(d)
  ROOT t = (f32[4,3], f32[4,3]) tuple(d, n)
}
""", "fusion")
    assert Opcode.DOT in {i.opcode for i in module.entry.instructions}
    assert all("dot" not in ops for ops in fused_ops(module))


REDUCE_EPILOGUE = """
HloModule mean
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[8,16] parameter(0)
  zero = f32[] constant(0)
  r = f32[8] reduce(x, zero), dimensions={1}, to_apply=add_f32
  n = f32[] constant(16)
  nb = f32[8] broadcast(n), dimensions={}
  ROOT m = f32[8] divide(r, nb)
}
"""


def test_reduce_below_a_broadcast_is_not_recomputed_per_element():
    module, _ = golden("""
HloModule softmax_tail
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[8,16] parameter(0)
  zero = f32[] constant(0)
  r = f32[8] reduce(x, zero), dimensions={1}, to_apply=add_f32
  rb = f32[8,16] broadcast(r), dimensions={0}
  ROOT q = f32[8,16] divide(x, rb)
}
""", "fusion")
    loops = [ops for ops in fused_ops(module) if "divide" in ops]
    assert loops and "reduce" not in loops[0]


def test_barriers_and_custom_calls_stay_out():
    # Not evaluated: the interpreter runs only a few custom-call targets.
    module = parse_module("""
HloModule barriers
ENTRY e {
  x = f32[8] parameter(0)
  n = f32[8] negate(x)
  ob = f32[8] opt-barrier(n)
  a = f32[8] abs(ob)
  cc = f32[8] custom-call(a), custom_call_target="my_kernel"
  s = f32[8] sqrt(cc)
  ROOT e2 = f32[8] exponential(s)
}
""")
    run_passes(module, "fusion")
    top = {i.opcode for i in module.entry.instructions}
    assert {Opcode.OPT_BARRIER, Opcode.CUSTOM_CALL, Opcode.NEGATE, Opcode.ABS} <= top
    assert fused_ops(module) == [["sqrt", "exponential"]]


WHILE_LOOP = """
HloModule loop
body {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  half = f32[] constant(0.5)
  hb = f32[8] broadcast(half), dimensions={}
  v2 = f32[8] multiply(v, hb)
  v3 = f32[8] add(v2, hb)
  ROOT t = (s32[], f32[8]) tuple(i2, v3)
}
cond {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  x = f32[8] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, x)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(w), index=1
}
"""


def test_fusion_runs_inside_loop_bodies_but_not_across_the_loop():
    module, printed = golden(WHILE_LOOP, "fusion")
    body = module.computation("body")
    fusions = [i for i in body.instructions if i.opcode == Opcode.FUSION]
    assert len(fusions) == 1 and fusions[0].shape.dims == (8,)
    assert any(i.opcode == Opcode.WHILE for i in module.entry.instructions)
    # The condition is a program computation too, but a lone compare is not worth a fusion.
    assert not any(i.opcode == Opcode.FUSION for i in module.computation("cond").instructions)


def test_reducers_are_never_fused_into():
    module, _ = golden(REDUCE_EPILOGUE, "fusion")
    adder = module.computation("add_f32")
    assert [i.opcode.value for i in adder.post_order()] == ["parameter", "parameter", "add"]


@pytest.mark.parametrize("max_ops", [2, 3, 5])
def test_max_ops_bounds_every_fusion(max_ops):
    text = "HloModule long\nENTRY e {\n  x = f32[8] parameter(0)\n  v0 = f32[8] negate(x)\n"
    for k in range(1, 12):
        op = ("sine", "cosine", "negate", "abs")[k % 4]
        text += f"  v{k} = f32[8] {op}(v{k - 1})\n"
    text += "  ROOT r = f32[8] negate(v11)\n}\n"
    module, _ = golden(text, f"fusion{{max-ops={max_ops}}}")
    sizes = [len(ops) for ops in fused_ops(module)]
    assert sizes and max(sizes) <= max_ops
    assert fusion_count(module) >= 12 // max_ops


def test_control_dependencies_keep_instructions_out():
    module = parse_module("""
HloModule ctrl
ENTRY e {
  x = f32[8] parameter(0)
  a = f32[8] negate(x)
  b = f32[8] abs(x), control-predecessors={a}
  ROOT c = f32[8] add(a, b)
}
""")
    run_passes(module, "fusion")
    b = next(i for i in module.entry.instructions if i.name == "b")
    assert b.parent is module.entry and b.control_predecessors


def test_kernel_and_fusion_counts():
    module = parse_module(CHAIN)
    assert fusion_count(module) == 0 and kernel_count(module) == 5  # add negate bcast mul tanh
    run_passes(module, "fusion")
    assert (fusion_count(module), kernel_count(module)) == (1, 1)


def test_fused_text_round_trips():
    module, printed = golden(DOT_EPILOGUE, "fusion")
    again = print_module(parse_module(printed))
    assert again == printed
    assert re.search(r"fusion\(.*\), kind=kOutput, calls=%fused_computation", printed)


def test_reduce_window_absorbs_cheap_producers_only():
    module, _ = golden("""
HloModule pool
max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[16] parameter(0)
  n = f32[16] negate(x)
  t = f32[16] tanh(x)
  s = f32[16] add(n, t)
  lo = f32[] constant(-inf)
  ROOT r = f32[8] reduce-window(s, lo), window={size=3 stride=2 pad=0_1}, to_apply=max_f32
}
""", "fusion")
    # Windows overlap, so the expensive tanh would run up to twice per element: it stays out.
    assert fused_ops(module) and "tanh" not in fused_ops(module)[0]
    assert "negate" in fused_ops(module)[0] and "reduce-window" in fused_ops(module)[0]
