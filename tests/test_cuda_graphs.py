"""CUDA graphs (hloc.runtime.cuda.graphs) on `cuda-emulated`: the emulator records what a
capture would queue, refuses host transfers inside it as a GPU does, and replays the
recording, so the runner's graph plan runs here exactly as on a GPU. Marked `gpu`: the same
on a real device."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.bundle import read_bundle
from hloc.errors import InputError
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
def test_a_data_dependent_loop_reads_its_predicate_between_graphs(bundles, monkeypatch):
    ex = _load(bundles["while_dynamic"], monkeypatch)
    loop = next(t for t in ex.program.walk() if t.kind is ThunkKind.WHILE)
    assert loop.trip_count is None
    assert any(not s.graph for s in graphs.segments(ex.program.main))
    ex.run(_inputs("while_dynamic", ex, 0))
    assert ex.runner.graph_captures >= 1


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


def test_the_switch_is_checked(monkeypatch):
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "yes")
    with pytest.raises(InputError, match="HLOC_CUDA_GRAPHS"):
        graphs.graphs_enabled()


@pytest.mark.gpu
def test_graphs_on_a_gpu(bundles, monkeypatch):
    """On a real device: graphs and direct launches agree bit for bit, and graphs ran."""
    from hloc.runtime import load

    from .test_cuda_samples import _cuda_device_available

    if not _cuda_device_available():
        pytest.skip("needs cuda-bindings and an NVIDIA GPU")

    for name in ("scan_rnn", "while_dynamic", "streamed", "mlp"):
        monkeypatch.setenv("HLOC_CUDA_GRAPHS", "1")
        graphed = load(bundles[name], "cuda")
        monkeypatch.setenv("HLOC_CUDA_GRAPHS", "0")
        direct = load(bundles[name], "cuda")
        for seed in (0, 1):
            args = _inputs(name, graphed, seed)
            _same(graphed.run(args), direct.run(args))
        assert graphed.runner.graphs_on and graphed.runner.graph_launches > 0, name


@pytest.mark.cpu
def test_inspect_shows_the_graph_plan(bundles):
    import json

    from .test_cli import hloc

    result = hloc("inspect", bundles["while_dynamic"], "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)["gpu_graphs"]
    assert plan["host_driven"] >= 1 and plan["graphs"] >= 1
    assert any("while" in line and "host-driven" in line for line in plan["segments"])
    text = hloc("inspect", bundles["scan_rnn"]).output
    assert "CUDA graphs (HLOC_CUDA_GRAPHS): 1 of the main program's stretches, 0 host-driven" \
        in text
