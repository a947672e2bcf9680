"""The heap simulator, buffer assignment, copy insertion and the bundle forms of an assignment."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hloc.analysis.storage import DependencyOrder
from hloc.buffers import ALIGNMENT, HeapItem, simulate
from hloc.buffers.heap import alignment, lower_bound
from hloc.buffers.hosting import host_greedy, host_peaks, make_hosts
from hloc.frontend.gen import hlo_pb2
from hloc.ir.text.parser import parse_module
from hloc.ir.text.printer import print_module
from hloc.passes import lookup_pass
from hloc.passes.copy_insertion import CopyInsertion
from hloc.plan import plan

from .support.buffers import check_plan, interpret, run_audited, same_bits

pytestmark = pytest.mark.pure


# ---- heap simulator ------------------------------------------------------------------------------

def test_best_fit_reuses_the_tightest_gap():
    items = [HeapItem(0, 0, 20, 64), HeapItem(1, 0, 5, 100), HeapItem(2, 0, 20, 64),
             HeapItem(3, 6, 20, 60), HeapItem(4, 6, 20, 64)]
    result = simulate(items, orders=("live-range",))
    offs = result.offsets
    # Same start: bigger first. 100 bytes take an aligned 128.
    assert (offs[1], offs[0], offs[2]) == (0, 128, 192)
    # Item 1 dies at tick 5; its 128-byte hole takes both later items instead of the top.
    assert (offs[3], offs[4]) == (0, 64)
    assert result.size == 256
    assert all(o % ALIGNMENT == 0 for o in offs.values())


def test_small_blocks_are_aligned_to_their_size_only():
    # Four scalars live at once take 16 bytes, not 4 x 64; a 24-byte block takes a 32-byte
    # alignment, a 100-byte one the full ALIGNMENT.
    items = [HeapItem(k, 0, 9, 4) for k in range(4)]
    items += [HeapItem(4, 0, 9, 24), HeapItem(5, 0, 9, 100), HeapItem(6, 0, 9, 1)]
    result = simulate(items)
    offs = result.offsets
    for it in items:
        assert offs[it.key] % alignment(it.size) == 0
    assert alignment(4) == 4 and alignment(24) == 32 and alignment(100) == ALIGNMENT
    assert result.size <= 100 + 24 + 4 * 4 + 1 + 8 + 3  # what alignment padding may add
    spans = sorted((offs[it.key], offs[it.key] + it.size) for it in items)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_hosting_in_outputs_respects_their_window_and_size():
    # A 1000-byte output written at tick 10 can hold temporaries that end before tick 10, at
    # most 1000 bytes of them at once; both strategies host the peak's temporaries there.
    items = {0: HeapItem(0, 0, 1, 1000), 1: HeapItem(1, 2, 3, 600), 2: HeapItem(2, 2, 3, 600),
             3: HeapItem(3, 2, 3, 600), 4: HeapItem(4, 5, 11, 64)}
    for strategy in (host_greedy, host_peaks):
        hosted = strategy(items, make_hosts([(7, 1000, 10, 12)]))
        assert 4 not in hosted  # still live when the output is written
        assert {index for index, _ in hosted.values()} == {7}
        for tick in range(4):
            spans = sorted((off, off + items[k].size) for k, (_, off) in hosted.items()
                           if items[k].start <= tick <= items[k].end)
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)) and spans[-1][1] <= 1000
        left = [it for k, it in items.items() if k not in hosted]
        assert lower_bound(left) == 1200  # one 600-byte temporary moved out of the peak


def test_keeps_the_smaller_of_the_two_orders():
    # Placed by start tick, the long small item lands at 0 and the big ones stack above it;
    # placed by size, the big ones share offset 0 and the small one goes on top.
    items = [HeapItem(0, 0, 9, 64), HeapItem(1, 1, 4, 1024), HeapItem(2, 5, 9, 1024)]
    by_start = simulate(items, orders=("live-range",))
    by_size = simulate(items, orders=("size",))
    both = simulate(items)
    assert both.size == min(by_start.size, by_size.size)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10), st.integers(0, 500)),
                max_size=40))
def test_heap_never_overlaps_live_items(raw):
    items = [HeapItem(k, s, s + d, size) for k, (s, d, size) in enumerate(raw)]
    result = simulate(items)
    for a, b in itertools.combinations(items, 2):
        if a.size and b.size and a.start <= b.end and b.start <= a.end:
            oa, ob = result.offsets[a.key], result.offsets[b.key]
            assert oa + a.size <= ob or ob + b.size <= oa
    assert result.size >= lower_bound(items)
    assert all(result.offsets[it.key] + it.size <= result.size for it in items if it.size)


# ---- assignment ----------------------------------------------------------------------------------

CHAIN = """
HloModule chain

ENTRY %main (a: f32[256], b: f32[256]) -> (f32[256], f32[256]) {
  %a = f32[256] parameter(0)
  %b = f32[256] parameter(1)
  %c = f32[256] constant({...})
  %x1 = f32[256] exponential(%a)
  %x2 = f32[256] add(%x1, %b)
  %x3 = f32[256] sine(%x2)
  %x4 = f32[256] multiply(%x3, %x3)
  %y = f32[256] reverse(%x4), dimensions={0}
  %z = f32[256] add(%y, %c)
  ROOT %r = (f32[256], f32[256]) tuple(%z, %a)
}
"""


def _chain():
    text = CHAIN.replace("{...}", "{" + ",".join(str(i) for i in range(256)) + "}")
    return parse_module(text)


def test_allocations_and_elementwise_reuse():
    m = _chain()
    p = plan(m)
    check_plan(p)
    kinds = [a.kind for a in p.assignment.allocations]
    assert kinds == ["parameter", "parameter", "constant", "output", "output", "temp"]
    # The elementwise chain x1..x4 runs in one reused buffer, which dies at y (a reverse, so
    # y needs its own); z (an output) takes y's storage over. The chosen schedule copies the
    # returned parameter last, so the chain lives in that output's allocation until then:
    # nothing is left for the temp allocation.
    assert p.memory.temp_bytes == 0
    order = p.schedule["main"]
    assert order.index("copy") > order.index("x4")
    units = [u for u in p.assignment.units.values() if len(u) > 1]
    assert len(units) == 1 and len(units[0]) == 4
    assert p.memory.argument_bytes == 2048 and p.memory.constant_bytes == 1024
    assert p.memory.output_bytes == 2048
    # The returned parameter was copied: outputs never live in parameter storage unaliased.
    assert "copy" in [i.opcode.value for i in m.entry.instructions]
    slices = {s.allocation for _, s in p.program.outputs}
    assert not slices & {a.index for a in p.assignment.allocations if a.kind == "parameter"}


def test_temp_lower_bound_and_report():
    m = _chain()
    p = plan(m)
    a = p.assignment
    assert a.temp_lower_bound <= p.memory.temp_bytes
    text = p.members()["buffer_assignment.txt"].decode()
    assert "lower bound" in text and "allocation 5:" in text and "temp" in text
    assert "%x4" in text and "live [" in text


def test_buffer_assignment_proto():
    m = _chain()
    p = plan(m)
    pb = hlo_pb2.BufferAssignmentProto.FromString(p.members()["buffer_assignment.pb"])
    a = p.assignment
    assert len(pb.logical_buffers) == len(a.dataflow.values)
    assert [x.size for x in pb.buffer_allocations] == [x.size for x in a.allocations]
    params = [x for x in pb.buffer_allocations if x.is_entry_computation_parameter]
    assert [x.parameter_number for x in params] == [0, 1]
    assert sum(x.is_constant for x in pb.buffer_allocations) == 1
    ids = {lb.id for lb in pb.logical_buffers}
    for alloc in pb.buffer_allocations:
        for assigned in alloc.assigned:
            assert assigned.logical_buffer_id in ids
            assert assigned.offset + assigned.size <= alloc.size
    trace = pb.heap_simulator_traces[0]
    assert trace.buffer_allocation_index == a.temp_allocation.index
    assert {e.kind for e in trace.events} >= {0, 1}


DONATION = """
HloModule m, input_output_alias={ {0}: (0, {}, may-alias) }

%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %a = f32[] add(%x, %y)
}

ENTRY %main (w: f32[64], g: f32[64]) -> (f32[64], f32[]) {
  %w = f32[64] parameter(0)
  %g = f32[64] parameter(1)
  %s = f32[64] subtract(%w, %g)
  %z = f32[] constant(0)
  %n = f32[] reduce(%w, %z), dimensions={0}, to_apply=%sum
  ROOT %r = (f32[64], f32[]) tuple(%s, %n)
}
"""


def test_donated_parameter_holds_the_output():
    import numpy as np

    m = parse_module(DONATION)
    p = plan(m)
    check_plan(p)
    out0 = p.program.outputs[0][1]
    param0 = next(a for a in p.assignment.allocations if a.kind == "parameter"
                  and a.parameter_number == 0)
    assert out0.allocation == param0.index and param0.maybe_live_out
    assert p.memory.temp_bytes == 0
    # The reduce reads w, so it must run before w is overwritten in place.
    order = p.schedule["main"]
    assert order.index("n") < order.index("s")
    args = [np.arange(64, dtype=np.float32), np.ones(64, dtype=np.float32)]
    got = run_audited(p, args)
    assert all(same_bits(g, r) for g, r in zip(got, interpret(m, args), strict=True))


# ---- copy insertion ------------------------------------------------------------------------------

LOOP_WITH_READERS = """
HloModule m

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %x = f32[8] get-tuple-element(%p), index=1
  %u = f32[2] slice(%x), slice={[0:2]}
  %e = f32[2] exponential(%u)
  %d = f32[8] dynamic-update-slice(%x, %e, %i)
  %r = f32[8] reverse(%x), dimensions={0}
  ROOT %t = (s32[], f32[8]) tuple(%i2, %d)
}

%cond (q: (s32[], f32[8])) -> pred[] {
  %q = (s32[], f32[8]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (a: f32[8]) -> (f32[8], f32[8]) {
  %a = f32[8] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]) tuple(%zero, %a)
  %w = (s32[], f32[8]) while(%init), condition=%cond, body=%body
  %out = f32[8] get-tuple-element(%w), index=1
  ROOT %root = (f32[8], f32[8]) tuple(%out, %a)
}
"""


def test_copy_insertion_rules_on_a_loop():
    m = parse_module(LOOP_WITH_READERS)
    assert lookup_pass("copy-insertion") is CopyInsertion
    assert CopyInsertion().run(m)
    text = print_module(m)
    body = m.computation("body")
    # The loop's init: the constant counter and the parameter are copied.
    init = m.entry.get("w").operands[0]
    assert [op.opcode.value for op in init.operands] == ["copy", "copy"]
    # The in-place update of the slot stays in place; the other readers of the old value
    # (slice, reverse) are ordered before it.
    d = body.get("d")
    assert d.operands[0].name == "x"
    order = DependencyOrder(body)
    assert order.reaches(body.get("u"), d) and order.reaches(body.get("r"), d)
    assert "r" in {p.name for p in d.control_predecessors}
    # The counter's increment reads the old counter elementwise: written in place, after the
    # dynamic-update-slice reads it.
    assert body.root.operands[0].name == "i2"
    assert "d" in {p.name for p in body.get("i2").control_predecessors}
    # The returned parameter is copied at the root.
    assert m.entry.root.operands[1].opcode.value == "copy"
    assert not CopyInsertion().run(m), "not idempotent:\n" + text


def test_copy_insertion_is_correct_on_the_loop():
    import numpy as np

    m = parse_module(LOOP_WITH_READERS)
    args = [np.linspace(-1, 1, 8, dtype=np.float32)]
    want = interpret(m, args)
    p = plan(m)
    check_plan(p)
    got = run_audited(p, args)
    assert all(same_bits(g, r) for g, r in zip(got, want, strict=True))


def test_repeated_root_and_constant_root_are_copied():
    m = parse_module("""
HloModule m

ENTRY %main (a: f32[4]) -> (f32[4], f32[4], f32[4]) {
  %a = f32[4] parameter(0)
  %n = f32[4] negate(%a)
  %c = f32[4] constant({1, 2, 3, 4})
  ROOT %r = (f32[4], f32[4], f32[4]) tuple(%n, %n, %c)
}
""")
    CopyInsertion().run(m)
    ops = m.entry.root.operands
    assert ops[0].name == "n" and ops[1].opcode.value == "copy" and ops[2].opcode.value == "copy"
    p = plan(m)
    check_plan(p)
    assert len({s for _, s in p.program.outputs}) == 3
