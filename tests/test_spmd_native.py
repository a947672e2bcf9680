"""Multi-device bundles on the native runtimes: every partitioned JAX sample (samples/spmd) in
every form compiles for cpu (and the small ones for cuda, run on cuda-emulated), runs with all
devices in this process (one thread and one arena per device, an InProcessCommunicator) and
matches XLA's GLOBAL outputs; async pairs, collective-broadcast and replica-id match the
reference interpreter; the manifest and `hloc inspect` show the devices; the arena executor
proves the buffer assignment of collective thunks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from hloc.compiler import CompileOptions, compile
from hloc.runtime import load
from hloc.runtime.spmd_bundles import SpmdBundleExecutable

from .test_spmd_samples import FORMS, NAMES, SPMD, _sample

pytestmark = pytest.mark.cpu


def _bundle(tmp_path, source, target="cpu", opt_level=0) -> str:
    out = str(tmp_path / f"{target}.bundle")
    compile(str(source), out, CompileOptions(target=target, opt_level=opt_level))
    return out


def _check_sample(path: str, device: str, name: str, form: str) -> None:
    meta, args, expected = _sample(name)
    ex = load(path, device)
    assert isinstance(ex, SpmdBundleExecutable) and len(ex.executables) == meta["devices"]
    if form == ".opt.hlo":  # the text form does not record the output sharding
        ex.output_sharding_texts = [o["sharding"] for o in meta["outputs"]]
    tol = meta["tolerance"]
    for _ in range(2):  # a second run reuses every device's arena
        outs = ex.run(args)
        assert len(outs) == len(expected)
        for got, want in zip(outs, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"])


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", NAMES)
def test_cpu_bundle_matches_xla(name, form, tmp_path):
    # -O0 keeps the test time down; -O2 (the default pipeline) for the two cheap samples.
    o2 = form == ".opt.pb" and name in ("shard_map_collectives", "jit_sharded_matmul")
    path = _bundle(tmp_path, SPMD / f"{name}{form}", opt_level=2 if o2 else 0)
    _check_sample(path, "cpu", name, form)


@pytest.mark.parametrize("name, form", [("shard_map_2dev", ".opt.pb"),
                                        ("shard_map_collectives", ".opt.hlo")])
def test_cuda_bundle_on_cuda_emulated_matches_xla(name, form, tmp_path):
    path = _bundle(tmp_path, SPMD / f"{name}{form}", target="cuda", opt_level=2)
    _check_sample(path, "cuda-emulated", name, form)
    from hloc.bundle import read_bundle

    gpu = json.loads(bytes(read_bundle(path).members["gpu_thunks.json"]))
    assert "collective" in {t["kind"] for t in gpu["main"]}


ASYNC = """HloModule m, replica_count=2, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  x = f32[4] parameter(0)
  r = u32[] replica-id()
  p = u32[] partition-id()
  rf = f32[] convert(r)
  pf = f32[] convert(p)
  ten = f32[] constant(10)
  rt = f32[] multiply(rf, ten)
  id = f32[] add(rt, pf)
  b = f32[4] broadcast(id), dimensions={}
  v = f32[4] add(x, b)
  ars = f32[4] all-reduce-start(v), channel_id=1, replica_groups={{0,1}}, to_apply=add
  ar = f32[4] all-reduce-done(ars)
  ags = (f32[4], f32[8]) all-gather-start(v), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
  ag = f32[8] all-gather-done(ags)
  cps = (f32[4], f32[4], u32[], u32[]) collective-permute-start(v), channel_id=3, source_target_pairs={{0,1},{1,0}}
  cp = f32[4] collective-permute-done(cps)
  cb = f32[4] collective-broadcast(v), replica_groups={{1,0}}
  ROOT t = (f32[4], f32[8], f32[4], f32[4], u32[]) tuple(ar, ag, cp, cb, r)
}
"""


def test_async_pairs_broadcast_and_replica_id_match_the_interpreter(tmp_path):
    from hloc.ir.text.parser import parse_module
    from hloc.runtime.spmd import run_devices

    source = tmp_path / "async.hlo"
    source.write_text(ASYNC)
    x = np.arange(4, dtype=np.float32)
    devices = [(0, 0), (0, 1), (1, 0), (1, 1)]
    per_device = {d: [x * (1 + d[0] + 2 * d[1])] for d in devices}
    want = run_devices(parse_module(ASYNC), per_device)
    ex = load(_bundle(tmp_path, source), "cpu")
    got = ex.run_devices(per_device)
    for d in devices:
        for g, w in zip(got[d], want[d], strict=True):
            np.testing.assert_array_equal(g, w)
    assert int(got[(1, 0)][4]) == 1 and got[(0, 1)][3].tolist() == got[(1, 1)][3].tolist()


def test_manifest_and_inspect_show_the_devices(tmp_path):
    from hloc.bundle import manifest_problem, read_bundle
    from hloc.cli.inspect_cmd import inspect

    path = _bundle(tmp_path, SPMD / "mesh2d_transformer.opt.pb")
    manifest = read_bundle(path).manifest
    assert manifest_problem(manifest, strict=True) is None
    meta = json.loads((SPMD / "mesh2d_transformer.json").read_text())
    devices = manifest["devices"]
    assert devices["count"] == meta["devices"] == 4
    assert [i for row in devices["device_assignment"] for i in row] == meta["device_ids"]
    assert len(devices["parameters"]) == len(meta["params"])
    assert len(devices["outputs"]) == len(meta["outputs"])
    summary = json.loads(CliRunner().invoke(inspect, [path, "--json"]).output)
    assert summary["devices"] == devices
    text = CliRunner().invoke(inspect, [path]).output
    assert "devices: 4 (1 replica(s) x 4 partition(s))" in text
    assert "collective=" in text and "param 0 sharding: {" in text


def test_one_device_bundles_have_no_devices_section(tmp_path):
    from hloc.bundle import read_bundle

    source = tmp_path / "one.hlo"
    source.write_text("HloModule m\n\nENTRY e {\n  p = f32[4] parameter(0)\n"
                      "  ROOT n = f32[4] negate(p)\n}\n")
    assert "devices" not in read_bundle(_bundle(tmp_path, source)).manifest


def test_arena_executor_runs_collective_thunks_on_their_assigned_bytes():
    """Every value read from and written to its assigned bytes, one arena per device."""
    from hloc.collectives import DeviceGrid
    from hloc.compiler import run_passes
    from hloc.frontend import load as load_model
    from hloc.plan import plan as make_plan
    from hloc.runtime.arena import run_program
    from hloc.runtime.spmd import assemble_outputs, run_device_threads, shard_inputs

    name = "shard_map_collectives"
    meta, args, expected = _sample(name)
    module = load_model(SPMD / f"{name}.opt.pb").module
    run_passes(module, CompileOptions(target="cpu"), None)
    program = make_plan(module, target="cpu").program
    assert {"collective", "device-id"} <= set(program.kind_counts())
    results = run_device_threads(DeviceGrid.of(module.config),
                                 lambda ctx, a: run_program(module, program, a),
                                 shard_inputs(module, args))
    for got, want in zip(assemble_outputs(module, results), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_native_rank_runner_runs_one_device_with_its_context(tmp_path):
    """What an MPI rank runs (hloc.runtime.native_ranks), here one thread per rank."""
    from hloc.bundle import read_bundle
    from hloc.collectives import DeviceGrid
    from hloc.frontend import load as load_model
    from hloc.runtime.native_ranks import NATIVE_RANK_RUNNERS
    from hloc.runtime.spmd import assemble_outputs, run_device_threads, shard_inputs

    name = "shard_map_2dev"
    meta, args, expected = _sample(name)
    bundle = read_bundle(_bundle(tmp_path, SPMD / f"{name}.opt.pb"))
    module = load_model(SPMD / f"{name}.opt.pb").module
    results = run_device_threads(
        DeviceGrid.of(module.config),
        lambda ctx, a: NATIVE_RANK_RUNNERS["cpu"](bundle, ctx).run(a),
        shard_inputs(module, args))
    for got, want in zip(assemble_outputs(module, results), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
