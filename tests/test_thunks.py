"""Thunk emission, trip counts, the JSON and text forms, and the arena executor on layouts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hloc.errors import InputError
from hloc.ir.text.parser import parse_module
from hloc.plan import plan
from hloc.thunks import (
    Conditional,
    Copy,
    Gemm,
    Kernel,
    Memset,
    Sequential,
    Sort,
    While,
    program_from_json,
    program_to_json,
    program_to_text,
)
from hloc.thunks.trip_count import known_trip_count

from .support.buffers import check_plan, interpret, run_audited, same_bits

pytestmark = pytest.mark.pure

MIXED = """
HloModule mixed

%cmp (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %lt = pred[] compare(%a, %b), direction=LT
}

%fused (x: f32[4,4], y: f32[4,4]) -> f32[4,4] {
  %x = f32[4,4] parameter(0)
  %y = f32[4,4] parameter(1)
  ROOT %m = f32[4,4] multiply(%x, %y)
}

%helper (h: f32[4,4]) -> f32[4,4] {
  %h = f32[4,4] parameter(0)
  ROOT %hn = f32[4,4] negate(%h)
}

%body (p: (s32[], f32[4,4])) -> (s32[], f32[4,4]) {
  %p = (s32[], f32[4,4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %v = f32[4,4] get-tuple-element(%p), index=1
  %v2 = f32[4,4] sine(%v)
  ROOT %t = (s32[], f32[4,4]) tuple(%i2, %v2)
}

%cond (q: (s32[], f32[4,4])) -> pred[] {
  %q = (s32[], f32[4,4]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(5)
  ROOT %le = pred[] compare(%j, %n), direction=LE
}

%yes (a: (f32[4,4])) -> f32[4,4] {
  %a = (f32[4,4]) parameter(0)
  %ag = f32[4,4] get-tuple-element(%a), index=0
  ROOT %ae = f32[4,4] exponential(%ag)
}

%no (b: (f32[4,4])) -> f32[4,4] {
  %b = (f32[4,4]) parameter(0)
  %bg = f32[4,4] get-tuple-element(%b), index=0
  ROOT %bn = f32[4,4] negate(%bg)
}

ENTRY %main (x: f32[4,4], y: f32[4,4], flag: pred[]) -> (f32[4,4], f32[4,4], f32[4,4], f32[16]) {
  %x = f32[4,4] parameter(0)
  %y = f32[4,4] parameter(1)
  %flag = pred[] parameter(2)
  %d = f32[4,4] dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %f = f32[4,4] fusion(%d, %y), kind=kLoop, calls=%fused
  %cp = f32[4,4] copy(%f)
  %tr = f32[4,4]{0,1} copy(%f)
  %zero = f32[] constant(0)
  %z = f32[4,4] broadcast(%zero), dimensions={}
  %s = f32[4,4] add(%z, %tr)
  %c = f32[4,4] call(%s), to_apply=%helper
  %i0 = s32[] constant(1)
  %init = (s32[], f32[4,4]) tuple(%i0, %c)
  %w = (s32[], f32[4,4]) while(%init), condition=%cond, body=%body
  %wv = f32[4,4] get-tuple-element(%w), index=1
  %arg = (f32[4,4]) tuple(%wv)
  %k = f32[4,4] conditional(%flag, %arg, %arg), true_computation=%yes, false_computation=%no
  %flat = f32[16] bitcast(%cp)
  %srt = f32[16] sort(%flat), dimensions={0}, to_apply=%cmp
  ROOT %r = (f32[4,4], f32[4,4], f32[4,4], f32[16]) tuple(%k, %cp, %z, %srt)
}
"""


def _by_name(program):
    return {t.name: t for t in program.walk()}


def test_emission_picks_one_thunk_kind_per_instruction():
    m = parse_module(MIXED)
    p = plan(m)
    check_plan(p)
    t = _by_name(p.program)
    assert isinstance(t["d"], Gemm) and t["d"].lhs_contracting == (1,)
    assert isinstance(t["f"], Kernel) and t["f"].computation == "fused"
    assert isinstance(t["cp"], Copy)
    assert isinstance(t["tr"], Kernel) and t["tr"].opcode == "copy"  # a layout change
    assert isinstance(t["z"], Memset) and t["z"].byte == 0
    assert isinstance(t["c"], Sequential) and [x.name for x in t["c"].thunks] == ["hn"]
    assert isinstance(t["w"], While) and t["w"].trip_count == 5
    assert {x.name for x in t["w"].body} == {"i2", "v2"}
    assert isinstance(t["k"], Conditional) and t["k"].selector_is_pred
    assert [[x.name for x in b] for b in t["k"].branches] == [["ae"], ["bn"]]
    assert isinstance(t["srt"], Sort) and t["srt"].comparator == "cmp"
    for silent in ("x", "y", "zero", "init", "wv", "arg", "flat", "r", "i0"):
        assert silent not in t
    counts = p.program.kind_counts()
    assert counts["while"] == 1 and counts["gemm"] == 1


def test_program_runs_in_the_arena_with_layouts():
    m = parse_module(MIXED)
    rng = np.random.default_rng(0)
    for flag in (True, False):
        args = [rng.standard_normal((4, 4)).astype(np.float32),
                rng.standard_normal((4, 4)).astype(np.float32), np.array(flag)]
        want = interpret(m, args)
        p = plan(m)
        got = run_audited(p, args)
        assert all(same_bits(g, r) for g, r in zip(got, want, strict=True))


def test_json_round_trip_and_text():
    m = parse_module(MIXED)
    p = plan(m, target="cuda")
    data = program_to_json(p.program)
    assert data == program_to_json(plan(parse_module(MIXED), target="cuda").program)
    doc = json.loads(data)
    assert doc["version"] == 1 and doc["streams"]["num_streams"] >= 1
    assert program_from_json(data) == p.program
    text = program_to_text(p.program)
    assert "while %w" in text and "trip_count=5" in text and "branch 1:" in text
    assert p.members()["thunks.txt"].decode() == text


@pytest.mark.parametrize("bad", [b"nope", b'{"version": 2}', b'{"version": 1}',
                                 b'{"version": 1, "module": "m", "allocations": [], '
                                 b'"parameters": [], "outputs": [], "constants": [], '
                                 b'"sequence": [{"kind": "warp"}], "streams": null}'])
def test_bad_json_is_an_input_error(bad):
    with pytest.raises(InputError, match="thunks.json"):
        program_from_json(bad)


TRIP = """
HloModule t

%body (p: (s32[], f32[2])) -> (s32[], f32[2]) {
  %p = (s32[], f32[2]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %step = s32[] constant(STEP)
  %i2 = s32[] add(%step, %i)
  %v = f32[2] get-tuple-element(%p), index=1
  ROOT %t = (s32[], f32[2]) tuple(%i2, %v)
}

%cond (q: (s32[], f32[2])) -> pred[] {
  %q = (s32[], f32[2]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(BOUND)
  ROOT %c = pred[] compare(%n, %j), direction=DIR
}

ENTRY %main (a: f32[2]) -> (s32[], f32[2]) {
  %a = f32[2] parameter(0)
  %s = s32[] constant(START)
  %init = (s32[], f32[2]) tuple(%s, %a)
  ROOT %w = (s32[], f32[2]) while(%init), condition=%cond, body=%body
}
"""


@pytest.mark.parametrize("start,step,bound,direction,expected", [
    (0, 1, 10, "GT", 10),   # 10 > i  <=>  i < 10
    (0, 3, 10, "GT", 4),
    (0, 1, 10, "GE", 11),   # i <= 10
    (10, -2, 0, "LT", 5),   # 0 < i  <=>  i > 0
    (5, 1, 3, "GT", 0),
    (0, 2, 7, "NE", None),  # never equal: no proof
    (0, 1, 4, "NE", 4),
])
def test_trip_count_from_the_induction_pattern(start, step, bound, direction, expected):
    text = (TRIP.replace("START", str(start)).replace("STEP", str(step))
            .replace("BOUND", str(bound)).replace("DIR", direction))
    m = parse_module(text)
    w = m.entry.root
    assert known_trip_count(w) == expected
    if expected is not None:
        p = plan(m)
        got = run_audited(p, [np.zeros(2, np.float32)])  # raises if the count were wrong
        assert int(got[0]) == start + expected * step


def test_trip_count_from_backend_config():
    m = parse_module(TRIP.replace("START", "0").replace("STEP", "1").replace("BOUND", "3")
                     .replace("DIR", "GT").replace(
                         "body=%body", 'body=%body, backend_config={"known_trip_count":{"n":"3"}}'))
    assert known_trip_count(m.entry.root) == 3


def test_bundle_members_are_deterministic():
    a = plan(parse_module(MIXED), target="cuda").members()
    b = plan(parse_module(MIXED), target="cuda").members()
    assert sorted(a) == ["buffer_assignment.pb", "buffer_assignment.txt", "thunks.json", "thunks.txt"]
    assert a == b
