"""Sequential scheduling (list, dfs, post-order, auto) and CUDA stream assignment."""

from __future__ import annotations

import pytest

from hloc.analysis import AliasAnalysis, Dataflow
from hloc.ir.text.parser import parse_module
from hloc.passes.copy_insertion import CopyInsertion
from hloc.plan import plan
from hloc.schedule import ALGORITHMS, schedule_module
from hloc.schedule.memory_model import MemoryModel
from hloc.schedule.sequential import candidate_orders
from tests.conftest import SAMPLES, sample_names

from .support.buffers import prepare

pytestmark = pytest.mark.pure


def fan_module(n: int = 6) -> str:
    """n independent 'expand then reduce' branches, listed all expansions first: a plain
    post order keeps every big intermediate alive at once."""
    lines = ["  %a = f32[16] parameter(0)", "  %z = f32[] constant(0)"]
    for i in range(n):
        lines.append(f"  %big{i} = f32[64,16] broadcast(%a), dimensions={{1}}")
    for i in range(n):
        lines.append(f"  %red{i} = f32[16] reduce(%big{i}, %z), dimensions={{0}}, to_apply=%sum")
    lines.append(f"  ROOT %t = ({', '.join(['f32[16]'] * n)}) tuple("
                 + ", ".join(f"%red{i}" for i in range(n)) + ")")
    return ("HloModule fan\n\n%sum (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n"
            "  %y = f32[] parameter(1)\n  ROOT %s = f32[] add(%x, %y)\n}\n\n"
            f"ENTRY %main (a: f32[16]) -> ({', '.join(['f32[16]'] * n)}) {{\n"
            + "\n".join(lines) + "\n}\n")


def _model(module):
    alias = AliasAnalysis(module)
    return alias, MemoryModel(alias, module.entry, frozenset({module.entry}))


def test_list_scheduler_frees_big_temporaries_early():
    m = parse_module(fan_module())
    alias, model = _model(m)
    big = 64 * 16 * 4
    post = model.peak(ALGORITHMS.lookup("post-order")(model))
    listed = model.peak(ALGORITHMS.lookup("list")(model))
    assert post == 6 * big  # all six expansions live together
    assert listed == big  # each expansion is reduced (and freed) before the next
    auto = candidate_orders(alias, m.entry, "auto")["auto"]
    assert model.peak(auto) == big
    assert model.peak(ALGORITHMS.lookup("dfs")(model)) == big


def _respects_dependencies(order) -> bool:
    pos = {instr: i for i, instr in enumerate(order)}
    return all(pos[p] < pos[i] for i in order for p in i.operands + i.control_predecessors)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS) + ["auto"])
def test_schedules_respect_operands_and_control_edges(algorithm):
    m = parse_module(fan_module())
    # A control edge against the natural order: red5 must run before red0.
    red0, red5 = m.entry.get("red0"), m.entry.get("red5")
    red5.add_control_dependency(red0)
    schedule_module(m, algorithm)
    order = [m.entry.get(n) for n in m.schedule["main"]]
    assert sorted(i.name for i in order) == sorted(i.name for i in m.entry.instructions)
    assert _respects_dependencies(order)


def test_schedule_covers_sequential_computations_only():
    names = [n for n in sample_names() if n in ("fori_loop", "cond", "scan_rnn")]
    if not names:
        pytest.skip("no samples generated")
    for name in names:
        m = prepare(SAMPLES / f"{name}.opt.pb")
        CopyInsertion().run(m)
        schedule_module(m)
        df = Dataflow(m)
        sequential = {c.name for c in df.call_graph.sequential}
        assert set(m.schedule) == sequential
        for comp in df.call_graph.sequential:
            order = [comp.get(n) for n in m.schedule[comp.name]]
            assert _respects_dependencies(order)


def test_unknown_scheduler_is_an_input_error():
    from hloc.errors import InputError

    with pytest.raises(InputError, match="unknown scheduler"):
        schedule_module(parse_module(fan_module(2)), "magic")


# ---- streams -----------------------------------------------------------------------------------

def _thunk_dependencies(p):
    """Top-level thunk index pairs (i, j): j reads a value thunk i's instruction defines."""
    df = p.assignment.dataflow
    index = {t.name: k for k, t in enumerate(p.program.sequence)}
    instrs = {i.name: i for c in p.module.computations for i in c.instructions}
    deps = []
    for j, t in enumerate(p.program.sequence):
        for op in instrs[t.name].operands:
            for _, v in df.leaves_of(op):
                i = index.get(v.instruction.name)
                if i is not None and i != j:
                    deps.append((i, j))
    return deps


def _happens_before(streams, n):
    """clock[j][s]: the last thunk of stream s known complete when thunk j starts."""
    events = {e: (s, after) for e, s, after in streams.events}
    waits: dict[int, list[int]] = {}
    for j, e in streams.waits:
        waits.setdefault(j, []).append(e)
    width = streams.num_streams
    stream_clock = [[-1] * width for _ in range(width)]
    at_start, done = [], {}
    for j in range(n):
        s = streams.streams[j]
        clock = stream_clock[s]
        for e in waits.get(j, []):
            es, after = events[e]
            clock[:] = [max(a, b) for a, b in zip(clock, done[after], strict=True)]
        at_start.append(list(clock))
        clock[s] = j
        done[j] = list(clock)
    return at_start


def test_independent_chains_run_on_different_streams_with_waits_for_joins():
    m = parse_module("""
HloModule m

ENTRY %main (a: f32[32], b: f32[32]) -> f32[32] {
  %a = f32[32] parameter(0)
  %b = f32[32] parameter(1)
  %a1 = f32[32] exponential(%a)
  %b1 = f32[32] exponential(%b)
  %a2 = f32[32] sine(%a1)
  %b2 = f32[32] sine(%b1)
  ROOT %j = f32[32] add(%a2, %b2)
}
""")
    p = plan(m, target="cuda", max_streams=2)
    streams = p.program.streams
    assert streams is not None and streams.num_streams == 2
    by_name = {t.name: streams.streams[k] for k, t in enumerate(p.program.sequence)}
    assert by_name["a1"] != by_name["b1"]
    assert by_name["a2"] == by_name["a1"] and by_name["b2"] == by_name["b1"]
    assert len(streams.waits) == 1
    assert plan(m, target="cpu").program.streams is None


@pytest.mark.parametrize("name", [n for n in sample_names() if n in ("attention", "grads", "cnn",
                                                                      "fori_loop", "mlp")])
def test_stream_synchronization_covers_every_dependency(name):
    m = prepare(SAMPLES / f"{name}.opt.pb")
    p = plan(m, target="cuda", max_streams=3)
    streams = p.program.streams
    clocks = _happens_before(streams, len(p.program.sequence))
    for i, j in _thunk_dependencies(p):
        assert clocks[j][streams.streams[i]] >= i, f"thunk {j} may start before thunk {i}"
