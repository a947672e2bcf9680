"""CUDA graphs (hloc.runtime.cuda.graphs) on `cuda-emulated`: the emulator records what a
capture would queue, refuses host transfers inside it as a GPU does, and replays the
recording, so the runner's graph plan runs here exactly as on a GPU. Marked `gpu`: the same
on a real device."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.bundle import read_bundle
from hloc.errors import CheckFailed, InputError
from hloc.ir.text.parser import parse_module
from hloc.runtime.cuda import graphs
from hloc.runtime.cuda.emulated import CudaEmulatedExecutable
from hloc.runtime.interpreter import evaluate
from hloc.thunks.base import ThunkKind

from .conftest import SAMPLES, sample_arrays
from .support.bundles import compile_bundle, sample_bundle
from .test_cuda_schedule import MODULE as STREAMED  # while loop, host fallback, streams


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """name -> bundle path: samples with known-trip-count loops, a data-dependent loop,
    conditionals, dots; and a module with several streams and a host thunk."""
    root = tmp_path_factory.mktemp("graphs")
    out = {}
    for name in ("scan_rnn", "fori_loop", "while_dynamic", "cond", "switch", "mlp"):
        out[name] = str(sample_bundle(SAMPLES / f"{name}.pb", root / f"{name}.bundle",
                                      target="cuda"))
    out["streamed"] = str(compile_bundle(parse_module(STREAMED), root / "streamed.bundle",
                                         target="cuda"))
    return out


def _load(path, monkeypatch, on: bool = True) -> CudaEmulatedExecutable:
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "1" if on else "0")
    return CudaEmulatedExecutable(read_bundle(path))


def _inputs(name: str, ex, seed: int) -> list[np.ndarray]:
    """The sample's inputs for seed 0; other seeds scale its floats by up to 5% (integers and
    predicates kept: they may be loop bounds). The streamed module: standard normals."""
    rng = np.random.default_rng(seed)
    if name == "streamed":
        return [rng.standard_normal(p.shape.dims).astype(p.shape.np_dtype)
                for p in ex.module.entry.parameters]
    base = sample_arrays(name, "inputs")
    if seed == 0:
        return base
    return [(a * (1 + 0.05 * rng.uniform(-1, 1, a.shape))).astype(a.dtype)
            if a.dtype.kind == "f" else a.copy() for a in base]


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.cpu
@pytest.mark.parametrize("name", ["scan_rnn", "fori_loop", "while_dynamic", "cond", "switch",
                                  "mlp", "streamed"])
def test_graph_runs_match_direct_runs(name, bundles, monkeypatch):
    """Bit-identical outputs with and without graphs, over two runs with different inputs
    (the second run replays graphs captured in the first, on newly uploaded inputs); the
    interpreter agrees."""
    graphed = _load(bundles[name], monkeypatch, on=True)
    direct = _load(bundles[name], monkeypatch, on=False)
    for seed in (0, 1):
        args = _inputs(name, graphed, seed)
        got = graphed.run(args)
        _same(got, direct.run(args))
        want = evaluate(graphed.module, args).flatten()
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                       rtol=2e-4, atol=2e-5)
    runner = graphed.runner
    assert runner.graph_launches > 0 and direct.runner.graph_launches == 0
    captures = runner.graph_captures
    graphed.run(_inputs(name, graphed, 2))
    assert runner.graph_captures == captures  # replayed, not captured again


@pytest.mark.cpu
def test_known_trip_count_loops_are_unrolled_into_one_graph(bundles, monkeypatch):
    ex = _load(bundles["scan_rnn"], monkeypatch)
    main = ex.program.main
    loops = [t for t in ex.program.walk() if t.kind is ThunkKind.WHILE]
    assert loops and all(t.trip_count for t in loops)
    segs = graphs.segments(main)
    assert all(s.graph for s in segs), graphs.describe(main)
    ex.run(_inputs("scan_rnn", ex, 0))
    # One launch per segment a run: the loop is inside a graph, not driven from the host.
    assert ex.runner.graph_launches == len(segs)
    body = sum(graphs.nodes(t.body) * t.trip_count for t in loops if t in main)
    assert graphs.nodes(main) >= body > 0


@pytest.mark.cpu
def test_a_loop_too_big_for_a_graph_launches_its_body_per_trip(bundles, monkeypatch):
    monkeypatch.setattr(graphs, "MAX_NODES", 6)
    ex = _load(bundles["scan_rnn"], monkeypatch)
    loop = next(t for t in ex.program.main if t.kind is ThunkKind.WHILE)
    assert graphs.nodes((loop,)) is None  # no longer capturable whole
    args = _inputs("scan_rnn", ex, 0)
    got = ex.run(args)
    _same(got, _load(bundles["scan_rnn"], monkeypatch, on=False).run(args))
    if (graphs.nodes(loop.body) or 0) >= graphs.MIN_NESTED_NODES:
        assert ex.runner.graph_launches >= loop.trip_count


@pytest.mark.cpu
def test_without_conditional_nodes_a_data_dependent_loop_reads_its_predicate(bundles,
                                                                              monkeypatch):
    """HLOC_CUDA_CONDITIONAL_NODES=0 (or a driver before CUDA 12.8): the host reads the
    predicate after each condition run, between graph launches."""
    monkeypatch.setenv("HLOC_CUDA_CONDITIONAL_NODES", "0")
    ex = _load(bundles["while_dynamic"], monkeypatch)
    loop = next(t for t in ex.program.walk() if t.kind is ThunkKind.WHILE)
    assert loop.trip_count is None and not ex.runner.conditional_nodes
    assert any(not s.graph for s in ex.runner._segments)
    ex.run(_inputs("while_dynamic", ex, 0))
    assert ex.runner.graph_captures >= 1
    assert ex.runner.graph_launches > len(ex.runner._segments)  # per trip, not per run


# A loop whose trip count comes from a parameter, with a dot in its body, and a three-way
# conditional whose index is a parameter: trip counts and branches the graphs cannot know
# when they are captured.
DECIDED_ON_DEVICE = """HloModule decided
body {
  p = (s32[], f32[32,256], s32[], f32[256,256]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[32,256] get-tuple-element(p), index=1
  lim = s32[] get-tuple-element(p), index=2
  w = f32[256,256] get-tuple-element(p), index=3
  d = f32[32,256] dot(v, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  half = f32[] constant(0.5)
  h = f32[32,256] broadcast(half), dimensions={}
  one_f = f32[] constant(1)
  o = f32[32,256] broadcast(one_f), dimensions={}
  m = f32[32,256] multiply(d, h)
  a = f32[32,256] add(m, o)
  e = f32[32,256] sine(a)
  one = s32[] constant(1)
  n = s32[] add(i, one)
  ROOT t = (s32[], f32[32,256], s32[], f32[256,256]) tuple(n, e, lim, w)
}
cond {
  p = (s32[], f32[32,256], s32[], f32[256,256]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  lim = s32[] get-tuple-element(p), index=2
  ROOT lt = pred[] compare(i, lim), direction=LT
}
b0 {
  x = f32[32,256] parameter(0)
  ROOT r = f32[32,256] exponential(x)
}
b1 {
  x = f32[32,256] parameter(0)
  ROOT r = f32[32,256] negate(x)
}
b2 {
  x = f32[32,256] parameter(0)
  ROOT r = f32[32,256] cosine(x)
}
ENTRY e {
  x = f32[32,256] parameter(0)
  n = s32[] parameter(1)
  k = s32[] parameter(2)
  w = f32[256,256] parameter(3)
  zero = s32[] constant(0)
  init = (s32[], f32[32,256], s32[], f32[256,256]) tuple(zero, x, n, w)
  loop = (s32[], f32[32,256], s32[], f32[256,256]) while(init), condition=cond, body=body
  v = f32[32,256] get-tuple-element(loop), index=1
  c = f32[32,256] conditional(k, v, v, v), branch_computations={b0, b1, b2}
  steps = s32[] get-tuple-element(loop), index=0
  ROOT out = (f32[32,256], s32[]) tuple(c, steps)
}
"""


# A data-dependent loop nested in another, and a conditional in the outer body: nodes inside
# nodes (on a GPU, a body stream per nesting level).
NESTED_ON_DEVICE = """HloModule nested
inner_body {
  p = (s32[], f32[16], s32[]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  v = f32[16] get-tuple-element(p), index=1
  lim = s32[] get-tuple-element(p), index=2
  c = f32[] constant(1.5)
  b = f32[16] broadcast(c), dimensions={}
  s = f32[16] add(v, b)
  one = s32[] constant(1)
  n = s32[] add(j, one)
  ROOT t = (s32[], f32[16], s32[]) tuple(n, s, lim)
}
inner_cond {
  p = (s32[], f32[16], s32[]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  lim = s32[] get-tuple-element(p), index=2
  ROOT lt = pred[] compare(j, lim), direction=LT
}
br0 {
  x = f32[16] parameter(0)
  ROOT r = f32[16] sine(x)
}
br1 {
  x = f32[16] parameter(0)
  ROOT r = f32[16] cosine(x)
}
outer_body {
  p = (s32[], f32[16], s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[16] get-tuple-element(p), index=1
  lim = s32[] get-tuple-element(p), index=2
  ilim = s32[] get-tuple-element(p), index=3
  zero = s32[] constant(0)
  init = (s32[], f32[16], s32[]) tuple(zero, v, ilim)
  w = (s32[], f32[16], s32[]) while(init), condition=inner_cond, body=inner_body
  u = f32[16] get-tuple-element(w), index=1
  two = s32[] constant(2)
  r = s32[] remainder(i, two)
  k = f32[16] conditional(r, u, u), branch_computations={br0, br1}
  one = s32[] constant(1)
  n = s32[] add(i, one)
  ROOT t = (s32[], f32[16], s32[], s32[]) tuple(n, k, lim, ilim)
}
outer_cond {
  p = (s32[], f32[16], s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  lim = s32[] get-tuple-element(p), index=2
  ROOT lt = pred[] compare(i, lim), direction=LT
}
ENTRY e {
  x = f32[16] parameter(0)
  n = s32[] parameter(1)
  m = s32[] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], f32[16], s32[], s32[]) tuple(zero, x, n, m)
  loop = (s32[], f32[16], s32[], s32[]) while(init), condition=outer_cond, body=outer_body
  ROOT out = f32[16] get-tuple-element(loop), index=1
}
"""


@pytest.fixture(scope="module")
def decided(tmp_path_factory):
    path = tmp_path_factory.mktemp("decided") / "decided.bundle"
    return str(compile_bundle(parse_module(DECIDED_ON_DEVICE), path, target="cuda"))


@pytest.fixture(scope="module")
def nested(tmp_path_factory):
    path = tmp_path_factory.mktemp("nested") / "nested.bundle"
    return str(compile_bundle(parse_module(NESTED_ON_DEVICE), path, target="cuda"))


NESTED_TRIPS = ((0, 0), (1, 3), (4, 0), (5, 2), (3, 7))


def _nested_inputs(outer: int, inner: int) -> list[np.ndarray]:
    return [np.linspace(0, 1, 16, dtype=np.float32), np.array(outer, np.int32),
            np.array(inner, np.int32)]


def _decided_inputs(trips: int, branch: int) -> list[np.ndarray]:
    x = np.linspace(-1, 1, 32 * 256, dtype=np.float32).reshape(32, 256)
    w = (np.random.default_rng(3).standard_normal((256, 256)) / 16).astype(np.float32)
    return [x, np.array(trips, np.int32), np.array(branch, np.int32), w]


@pytest.mark.cpu
def test_loops_and_conditionals_run_as_conditional_nodes(decided, bundles, monkeypatch):
    """With conditional nodes a data-dependent loop and a conditional stay in the graph: one
    launch per graph a run, whatever the trip count or branch (out-of-range indices run the
    last branch), bit-identical to graphs off and to host-driven control flow; the
    interpreter agrees. The samples' loops and conditionals too."""
    ex = _load(decided, monkeypatch)
    runner = ex.runner
    assert runner.conditional_nodes and all(s.graph for s in runner._segments), \
        graphs.describe(ex.program.main, True)
    monkeypatch.setenv("HLOC_CUDA_CONDITIONAL_NODES", "0")
    host_driven = _load(decided, monkeypatch)
    direct = _load(decided, monkeypatch, on=False)
    for trips, branch in ((0, 0), (1, 1), (7, 2), (3, -1), (12, 3), (2, 99)):
        args = _decided_inputs(trips, branch)
        before = runner.graph_launches
        got = ex.run(args)
        assert runner.graph_launches - before == len(runner._segments)
        assert int(got[1]) == trips
        _same(got, direct.run(args))
        _same(got, host_driven.run(args))
        want = evaluate(ex.module, args).flatten()
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    assert runner.graph_captures == 1  # captured once, replayed for every trip count
    assert host_driven.runner.graph_launches > direct.runner.graph_launches
    monkeypatch.delenv("HLOC_CUDA_CONDITIONAL_NODES")
    for name in ("while_dynamic", "cond", "switch"):
        sample = _load(bundles[name], monkeypatch)
        assert all(s.graph for s in sample.runner._segments), name
        args = _inputs(name, sample, 1)
        _same(sample.run(args), _load(bundles[name], monkeypatch, on=False).run(args))


@pytest.mark.cpu
def test_nested_loops_become_nested_conditional_nodes(nested, monkeypatch):
    """Loops in loops, with a conditional in the outer body, all in one graph: one launch a
    run for every pair of trip counts, the same bits as without graphs and as host-driven."""
    ex = _load(nested, monkeypatch)
    assert all(s.graph for s in ex.runner._segments)
    monkeypatch.setenv("HLOC_CUDA_CONDITIONAL_NODES", "0")
    host_driven = _load(nested, monkeypatch)
    direct = _load(nested, monkeypatch, on=False)
    for outer, inner in NESTED_TRIPS:
        args = _nested_inputs(outer, inner)
        before = ex.runner.graph_launches
        got = ex.run(args)
        assert ex.runner.graph_launches - before == len(ex.runner._segments)
        _same(got, direct.run(args))
        _same(got, host_driven.run(args))
        want = evaluate(ex.module, args).flatten()
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.cpu
def test_library_calls_in_a_conditional_node_become_kernels(decided, monkeypatch):
    """cuBLAS (here its host stand-in) runs the loop's dot when the host drives the loop, but
    not inside a conditional node's body, where hloc's GEMM kernel runs it: a GPU's driver
    refuses to instantiate a WHILE node around cuBLAS' kernels. Same results either way."""
    monkeypatch.setenv("HLOC_CUDA_GEMM", "cublas")
    ex = _load(decided, monkeypatch)
    gemms = [t for t in ex.program.walk() if t.kind is ThunkKind.GEMM]
    assert gemms and all(t.blas is not None for t in gemms)
    monkeypatch.setenv("HLOC_CUDA_CONDITIONAL_NODES", "0")
    host_driven = _load(decided, monkeypatch)
    args = _decided_inputs(6, 0)
    got = ex.run(args)
    assert ex.runner.conditional_nodes and ex.runner.blas_calls == 0
    want = host_driven.run(args)
    assert host_driven.runner.blas_calls > 0  # captured into the body's own graph
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.cpu
def test_a_failed_conditional_node_keeps_graphs(decided, monkeypatch, capsys):
    """A capture that fails while building a conditional node turns conditional nodes off,
    not graphs: the loop is driven from the host from then on, with the same bits."""
    from hloc.runtime.cuda.emulated import HostMemory

    def refuse(self, *_):
        raise RuntimeError("conditional node refused")

    monkeypatch.setattr(HostMemory, "while_node", refuse)
    ex = _load(decided, monkeypatch)
    args = _decided_inputs(5, 1)
    got = ex.run(args)
    assert "conditional graph nodes off" in capsys.readouterr().err
    assert ex.runner.graphs_on and not ex.runner.conditional_nodes
    _same(got, _load(decided, monkeypatch, on=False).run(args))
    _same(ex.run(args), got)
    assert ex.runner.graph_launches > 0


@pytest.mark.parametrize("is_pred, count", [(True, 2), (False, 1), (False, 3)])
def test_the_switch_rule_is_the_conditional_thunks(is_pred, count):
    """The rule the set kernel applies (and the emulator models) is the one host-driven
    conditionals use: a pred picks branch 0 when true; an index out of range the last."""
    from hloc.runtime.cuda.cond_nodes import switch_index
    from hloc.thunks.thunks import Conditional

    t = Conditional("c", selector=None, branches=((),) * count, selector_is_pred=is_pred)
    values = (True, False) if is_pred else (-2**31, -1, 0, 1, 2, 3, 2**31 - 1)
    for v in values:
        raw = np.array(v, np.bool_ if is_pred else np.int32).tobytes()
        assert switch_index(raw, is_pred, count) == t.branch(v), v


def test_the_set_condition_kernels_assemble():
    """ptxas accepts the runtime's set kernels (their one call, cudaGraphSetConditional, left
    to the driver as it leaves vprintf) for the oldest and newest architectures."""
    from hloc.codegen.cuda import ptxas
    from hloc.runtime.cuda.cond_nodes import SET_CONDITION_PTX

    tool = ptxas.find_ptxas()
    if tool is None:
        pytest.skip("ptxas not found")
    for arch in ("sm_80", "sm_90"):
        result = ptxas.assemble(SET_CONDITION_PTX, arch, tool)
        assert set(result.kernels) >= {"hloc_set_while", "hloc_set_switch"}
    broken = SET_CONDITION_PTX.replace("cudaGraphSetConditional", "noSuchFunction")
    with pytest.raises(CheckFailed, match="noSuchFunction"):
        ptxas.assemble(broken, "sm_90", tool)


@pytest.mark.cpu
def test_a_host_transfer_inside_a_capture_turns_graphs_off(bundles, monkeypatch, capsys):
    """What a GPU does when a capture meets a host transfer, the emulator does too; the runner
    then says so once and runs without graphs (nothing ran during the capture)."""
    monkeypatch.setattr(graphs, "_DEVICE_WORK", graphs._DEVICE_WORK | {ThunkKind.HOST})
    ex = _load(bundles["streamed"], monkeypatch)
    assert any(t.kind is ThunkKind.HOST for t in ex.program.walk())
    args = _inputs("streamed", ex, 1)
    got = ex.run(args)
    assert "CUDA graphs off" in capsys.readouterr().err
    assert not ex.runner.graphs_on
    _same(got, _load(bundles["streamed"], monkeypatch, on=False).run(args))


@pytest.mark.cpu
def test_profiles_and_hooks_run_thunk_by_thunk(bundles, monkeypatch):
    ex = _load(bundles["mlp"], monkeypatch)
    args = _inputs("mlp", ex, 0)
    _, rows = ex.run_profiled(args)
    assert rows and ex.runner.graph_launches == 0
    seen = []
    ex.run_hooked(args, lambda t, run: (seen.append(t.name), run()))
    assert seen and ex.runner.graph_launches == 0


@pytest.mark.cpu
def test_emulated_capture_refuses_host_transfers():
    from hloc.runtime.cuda.emulated import HostMemory

    memory = HostMemory([], library=None)
    memory.begin_capture(True)
    with pytest.raises(RuntimeError, match="inside a graph capture"):
        memory.download_arrays([])
    memory.abort_capture()
    ops = []
    memory.begin_capture(False)
    memory.enqueue(lambda: ops.append(1))
    assert ops == []  # recorded, not run
    graph = memory.end_capture(False)
    memory.launch_graph(graph, False)
    memory.launch_graph(graph, False)
    assert ops == [1, 1]


@pytest.mark.parametrize("name, check", [("HLOC_CUDA_GRAPHS", graphs.graphs_enabled),
                                         ("HLOC_CUDA_CONDITIONAL_NODES",
                                          graphs.conditional_nodes_enabled)])
def test_the_switches_are_checked(name, check, monkeypatch):
    monkeypatch.setenv(name, "yes")
    with pytest.raises(InputError, match=name):
        check()
    monkeypatch.setenv(name, "0")
    assert not check()


@pytest.mark.gpu
def test_graphs_on_a_gpu(bundles, monkeypatch):
    """On a real device: graphs and direct launches agree bit for bit, and graphs ran."""
    from hloc.runtime import load

    from .test_cuda_samples import _cuda_device_available

    if not _cuda_device_available():
        pytest.skip("needs cuda-bindings and an NVIDIA GPU")

    for name in ("scan_rnn", "while_dynamic", "cond", "switch", "streamed", "mlp"):
        monkeypatch.setenv("HLOC_CUDA_GRAPHS", "1")
        graphed = load(bundles[name], "cuda")
        monkeypatch.setenv("HLOC_CUDA_GRAPHS", "0")
        direct = load(bundles[name], "cuda")
        for seed in (0, 1):
            args = _inputs(name, graphed, seed)
            _same(graphed.run(args), direct.run(args))
        assert graphed.runner.graphs_on and graphed.runner.graph_launches > 0, name


@pytest.mark.gpu
def test_conditional_nodes_on_a_gpu(decided, nested, monkeypatch, capsys):
    """On a real device (CUDA 12.8 or later): the loop (a cuBLAS-eligible dot in its body) and
    the conditional run as conditional nodes, one launch per graph a run, the same bits as
    without graphs and as host-driven control flow with hloc's GEMM kernel (what runs the dot
    inside the node), for every trip count and branch."""
    from hloc.runtime import load

    from .test_cuda_samples import _cuda_device_available

    if not _cuda_device_available():
        pytest.skip("needs cuda-bindings and an NVIDIA GPU")
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "1")
    ex = load(decided, "cuda")
    if not ex.memory.supports_conditional_nodes:
        pytest.skip("driver before CUDA 12.8: no conditional nodes")
    monkeypatch.setenv("HLOC_CUDA_GEMM", "kernel")
    monkeypatch.setenv("HLOC_CUDA_CONDITIONAL_NODES", "0")
    host_driven = load(decided, "cuda")
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "0")
    direct = load(decided, "cuda")
    runner = ex.runner
    for trips, branch in ((0, 0), (1, 1), (7, 2), (3, -1), (12, 3), (40, 99)):
        args = _decided_inputs(trips, branch)
        before = runner.graph_launches
        got = ex.run(args)
        assert "conditional graph nodes off" not in capsys.readouterr().err
        assert runner.conditional_nodes
        assert runner.graph_launches - before == len(runner._segments)
        assert int(got[1]) == trips
        _same(got, direct.run(args))
        _same(got, host_driven.run(args))
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "1")
    monkeypatch.delenv("HLOC_CUDA_CONDITIONAL_NODES")
    deep = load(nested, "cuda")
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "0")
    flat = load(nested, "cuda")
    for outer, inner in NESTED_TRIPS:  # nodes inside nodes
        args = _nested_inputs(outer, inner)
        before = deep.runner.graph_launches
        got = deep.run(args)
        assert "conditional graph nodes off" not in capsys.readouterr().err
        assert deep.runner.graph_launches - before == len(deep.runner._segments)
        _same(got, flat.run(args))


@pytest.mark.cpu
def test_inspect_shows_the_graph_plan(bundles):
    import json

    from .test_cli import hloc

    result = hloc("inspect", bundles["while_dynamic"], "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)["gpu_graphs"]
    # With conditional nodes the data-dependent loop is inside a graph; without, host-driven.
    assert plan["host_driven"] == 0 and plan["graphs"] >= 1
    assert plan["host_driven_without_conditional_nodes"] >= 1
    assert not any("host-driven" in line for line in plan["segments"])
    text = hloc("inspect", bundles["scan_rnn"]).output
    assert "CUDA graphs (HLOC_CUDA_GRAPHS): 1 of the main program's stretches, 0 host-driven " \
        "thunk(s) between them (without conditional nodes: 0)" in text


def test_conditional_nodes_need_a_recent_driver_and_bindings(monkeypatch):
    """Conditional nodes are built only with a CUDA 12.8 driver and cuda-bindings 13 (the
    signatures cond_nodes calls); anything older keeps the host-driven plan."""
    from hloc.runtime.cuda import cond_nodes

    monkeypatch.setattr(cond_nodes, "bindings_major", lambda: 13)
    assert cond_nodes.supported(13000) and cond_nodes.supported(12080)
    assert not cond_nodes.supported(12040)
    monkeypatch.setattr(cond_nodes, "bindings_major", lambda: 12)
    assert not cond_nodes.supported(13000)
