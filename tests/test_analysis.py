"""Dataflow, alias analysis, liveness and call-graph flattening on small hand-written modules."""

from __future__ import annotations

import pytest

from hloc.analysis import (
    AliasAnalysis,
    CallGraph,
    Dataflow,
    Liveness,
    Timeline,
    can_share_operand,
    flatten_call_graph,
    in_place_pairs,
)
from hloc.analysis.storage import DependencyOrder, is_read_only_storage, storage_root
from hloc.errors import UnsupportedError
from hloc.ir import Opcode
from hloc.ir.text.parser import parse_module

pytestmark = pytest.mark.pure

LOOP = """
HloModule loop

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %x = f32[4] get-tuple-element(%p), index=1
  %x2 = f32[4] multiply(%x, %x)
  ROOT %t = (s32[], f32[4]) tuple(%i2, %x2)
}

%cond (q: (s32[], f32[4])) -> pred[] {
  %q = (s32[], f32[4]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (a: f32[4]) -> (s32[], f32[4]) {
  %a = f32[4] parameter(0)
  %zero = s32[] constant(0)
  %ca = f32[4] copy(%a)
  %init = (s32[], f32[4]) tuple(%zero, %ca)
  ROOT %w = (s32[], f32[4]) while(%init), condition=%cond, body=%body
}
"""

CALLS = """
HloModule calls

%f (x: f32[3]) -> f32[3] {
  %x = f32[3] parameter(0)
  ROOT %n = f32[3] negate(%x)
}

%br0 (t: (f32[3])) -> f32[3] {
  %t = (f32[3]) parameter(0)
  ROOT %g = f32[3] get-tuple-element(%t), index=0
}

%br1 (t: (f32[3])) -> f32[3] {
  %t = (f32[3]) parameter(0)
  %g = f32[3] get-tuple-element(%t), index=0
  ROOT %e = f32[3] exponential(%g)
}

ENTRY %main (a: f32[3], s: s32[]) -> (f32[3], f32[3], f32[3]) {
  %a = f32[3] parameter(0)
  %s = s32[] parameter(1)
  %c1 = f32[3] call(%a), to_apply=%f
  %c2 = f32[3] call(%c1), to_apply=%f
  %arg = (f32[3]) tuple(%c2)
  %k = f32[3] conditional(%s, %arg, %arg), branch_computations={%br0, %br1}
  %b = f32[3] bitcast(%k)
  ROOT %r = (f32[3], f32[3], f32[3]) tuple(%c1, %b, %k)
}
"""


def _get(module, name):
    return next(i for c in module.computations for i in c.instructions if i.name == name)


def test_forwarding_instructions_define_no_values():
    m = parse_module(LOOP)
    df = Dataflow(m)
    init, ca = _get(m, "init"), _get(m, "ca")
    assert df.defined_by(init) == []
    assert df.value_at(init, (1,)) is df.value_at(ca)
    body_x = _get(m, "x")
    param = m.computation("body").parameter(0)
    assert df.value_at(body_x) is df.value_at(param, (1,))
    # The while defines its result and its parameters (tied together by alias analysis).
    w = m.entry.root
    assert {v.index for v in df.defined_by(w)} == {(0,), (1,)}
    assert df.value_at(w, (1,)) is not df.value_at(ca)


def test_uses_skip_forwarding_and_record_roots():
    m = parse_module(LOOP)
    df = Dataflow(m)
    x2 = df.value_at(_get(m, "x2"))
    assert x2.uses == []  # only the root tuple holds it
    assert [c.name for c in x2.root_of] == ["body"]
    ca = df.value_at(_get(m, "ca"))
    assert [u.instruction.name for u in ca.uses] == ["w"]


def test_while_buffer_joins_init_parameters_root_and_result():
    m = parse_module(LOOP)
    alias = AliasAnalysis(m)
    df = alias.dataflow
    w = m.entry.root
    buf = alias.buffer_at(w, (1,))
    names = {v.instruction.name for v in buf.values}
    assert names == {"ca", "p", "q", "x2", "w"}
    assert alias.buffer_at(w, (0,)) is not buf
    assert alias.buffer_of(df.value_at(_get(m, "a"))) is not buf


def test_calls_and_branch_parameters_forward():
    m = parse_module(CALLS)
    with pytest.raises(UnsupportedError):
        CallGraph(m)  # %f is called twice
    assert flatten_call_graph(m)
    assert not flatten_call_graph(m)
    df = Dataflow(m)
    c1, c2 = _get(m, "c1"), _get(m, "c2")
    assert c1.called[0] is not c2.called[0]
    assert df.value_at(c1).instruction.opcode == Opcode.NEGATE
    assert df.value_at(m.computation("br0").root) is df.value_at(c2)
    k = _get(m, "k")
    assert df.value_at(_get(m, "b")) is df.value_at(k)
    alias = AliasAnalysis(m, df)
    # A conditional's result shares storage with every branch root.
    assert alias.buffer_at(k) is alias.buffer_at(m.computation("br1").root)
    assert alias.buffer_at(k) is alias.buffer_at(c2)  # (copy insertion breaks this one)


def test_in_place_pairs_and_io_alias_join_buffers():
    m = parse_module("""
HloModule m, input_output_alias={ {1}: (0, {}, may-alias) }

ENTRY %main (a: f32[8], u: f32[2]) -> (f32[8], f32[8]) {
  %a = f32[8] parameter(0)
  %u = f32[2] parameter(1)
  %i = s32[] constant(2)
  %c = f32[8] copy(%a)
  %d = f32[8] dynamic-update-slice(%c, %u, %i)
  %n = f32[8] negate(%a)
  ROOT %r = (f32[8], f32[8]) tuple(%d, %n)
}
""")
    alias = AliasAnalysis(m)
    assert in_place_pairs(_get(m, "d")) == [((), 0, ())]
    assert alias.buffer_at(_get(m, "d")) is alias.buffer_at(_get(m, "c"))
    assert alias.buffer_at(_get(m, "n")) is alias.buffer_at(_get(m, "a"))
    assert storage_root(alias.dataflow, alias.dataflow.value_at(_get(m, "d"))).instruction.name == "c"


def test_can_share_operand():
    m = parse_module("""
HloModule m

%fe (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %lt = pred[4] compare(%x, %y), direction=LT
  ROOT %sel = f32[4] select(%lt, %x, %y)
}

%fr (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %rev = f32[4] reverse(%x), dimensions={0}
  ROOT %sum = f32[4] add(%rev, %y)
}

ENTRY %main (a: f32[4], b: f32[4]) -> (f32[4], f32[4], f32[4], pred[4], f32[2,2]) {
  %a = f32[4] parameter(0)
  %b = f32[4] parameter(1)
  %e = f32[4] fusion(%a, %b), kind=kLoop, calls=%fe
  %r = f32[4] fusion(%a, %b), kind=kLoop, calls=%fr
  %s = f32[4] add(%a, %b)
  %c = pred[4] compare(%a, %b), direction=GT
  %t = f32[2,2] reshape(%a)
  ROOT %o = (f32[4], f32[4], f32[4], pred[4], f32[2,2]) tuple(%e, %r, %s, %c, %t)
}
""")
    e, r, s, c, t = (_get(m, n) for n in "ersct")
    assert can_share_operand(e, 0) and can_share_operand(e, 1)
    assert not can_share_operand(r, 0) and can_share_operand(r, 1)
    assert can_share_operand(s, 0)
    assert not can_share_operand(c, 0)  # pred output: a different size
    assert not can_share_operand(t, 0)  # not elementwise


def test_can_share_operand_through_row_major_reshape():
    # A loop fusion that reshapes its operand (row-major to row-major) keeps every element at
    # its linear position, so it may write over the operand; a transpose may not, nor a
    # reshape out of a column-major layout.
    m = parse_module("""
HloModule m

%fsh (x: f32[8,4,16], y: f32[8,4]) -> f32[32,16] {
  %x = f32[8,4,16]{2,1,0} parameter(0)
  %y = f32[8,4]{1,0} parameter(1)
  %b = f32[8,4,16]{2,1,0} broadcast(%y), dimensions={0,1}
  %d = f32[8,4,16]{2,1,0} divide(%x, %b)
  ROOT %r = f32[32,16]{1,0} reshape(%d)
}

%ftr (x: f32[8,4,16]) -> f32[4,8,16] {
  %x = f32[8,4,16]{2,1,0} parameter(0)
  ROOT %t = f32[4,8,16]{2,1,0} transpose(%x), dimensions={1,0,2}
}

%fcm (x: f32[8,64]) -> f32[512] {
  %x = f32[8,64]{0,1} parameter(0)
  %e = f32[8,64]{0,1} exponential(%x)
  ROOT %r = f32[512]{0} reshape(%e)
}

ENTRY %main (a: f32[8,4,16], b: f32[8,4], c: f32[8,64]) -> (f32[32,16], f32[4,8,16], f32[512]) {
  %a = f32[8,4,16]{2,1,0} parameter(0)
  %b = f32[8,4]{1,0} parameter(1)
  %c = f32[8,64]{0,1} parameter(2)
  %sh = f32[32,16]{1,0} fusion(%a, %b), kind=kLoop, calls=%fsh
  %tr = f32[4,8,16]{2,1,0} fusion(%a), kind=kLoop, calls=%ftr
  %cm = f32[512]{0} fusion(%c), kind=kLoop, calls=%fcm
  ROOT %o = (f32[32,16], f32[4,8,16], f32[512]) tuple(%sh, %tr, %cm)
}
""")
    sh, tr, cm = (_get(m, n) for n in ("sh", "tr", "cm"))
    assert can_share_operand(sh, 0)
    assert not can_share_operand(sh, 1)  # broadcast: a different size anyway
    assert not can_share_operand(tr, 0)
    assert not can_share_operand(cm, 0)


def _schedule_in_order(module):
    graph = CallGraph(module)
    return {c: c.post_order() for c in graph.sequential}


def test_liveness_nests_loop_sequences_and_ends_at_last_use():
    m = parse_module(LOOP)
    alias = AliasAnalysis(m)
    timeline = Timeline(m, _schedule_in_order(m))
    live = Liveness(alias, timeline)
    df = alias.dataflow
    w = m.entry.root
    cond, body = m.computation("cond"), m.computation("body")
    # The entry runs around the loop: condition, then body, nested inside the while's ticks.
    assert timeline.start[w] < timeline.comp_start[cond] < timeline.comp_end[cond] \
        < timeline.comp_start[body] < timeline.comp_end[body] < timeline.end[w]
    i2 = df.value_at(_get(m, "i2"))
    assert live.value_range(i2) == (timeline.start[_get(m, "i2")], timeline.comp_end[body])
    one = df.value_at(body.get("one"))
    assert live.value_range(one)[1] == timeline.start[_get(m, "i2")]
    pred = df.value_at(cond.root)
    assert live.value_range(pred)[1] == timeline.comp_end[cond]
    out = df.value_at(w, (1,))
    assert live.value_range(out) == (timeline.end[w], timeline.length - 1)
    buf = alias.buffer_at(w, (1,))
    assert live.buffer_range(buf)[0] == live.value_range(df.value_at(_get(m, "ca")))[0]


def test_read_only_storage_follows_pass_through_slots():
    m = parse_module("""
HloModule m

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %x = f32[4] get-tuple-element(%p), index=1
  ROOT %t = (s32[], f32[4]) tuple(%i2, %x)
}

%cond (q: (s32[], f32[4])) -> pred[] {
  %q = (s32[], f32[4]) parameter(0)
  ROOT %f = pred[] constant(false)
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]) tuple(%zero, %a)
  %w = (s32[], f32[4]) while(%init), condition=%cond, body=%body
  ROOT %g = f32[4] get-tuple-element(%w), index=1
}
""")
    df = Dataflow(m)
    w = _get(m, "w")
    assert is_read_only_storage(df, df.value_at(w, (1,)))
    assert not is_read_only_storage(df, df.value_at(w, (0,)))  # the counter is written
    assert storage_root(df, df.value_at(w, (1,))).instruction.name == "a"


def test_dependency_order_tracks_added_edges():
    m = parse_module("""
HloModule m

ENTRY %main (a: f32[4]) -> (f32[4], f32[4]) {
  %a = f32[4] parameter(0)
  %x = f32[4] negate(%a)
  %y = f32[4] exponential(%a)
  ROOT %r = (f32[4], f32[4]) tuple(%x, %y)
}
""")
    order = DependencyOrder(m.entry)
    x, y, a = _get(m, "x"), _get(m, "y"), _get(m, "a")
    assert order.reaches(a, y) and not order.reaches(x, y) and not order.reaches(y, x)
    assert order.add_edge(x, y)
    assert order.reaches(x, y) and not order.reaches(y, x)
    assert not order.add_edge(a, y)  # already ordered through the operand
