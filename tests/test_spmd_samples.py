"""The partitioned JAX samples (samples/spmd): every form loads, runs on the reference
interpreter with all devices in one process (run_spmd) and matches XLA's GLOBAL outputs;
unpartitioned modules are refused; compile loads, verifies and fails cleanly for cpu."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hloc.errors import InputError
from hloc.frontend import load
from hloc.ir.text.parser import parse_module
from hloc.runtime.spmd import run_spmd

SPMD = Path(__file__).resolve().parent.parent / "samples" / "spmd"
NAMES = sorted(p.name[:-5] for p in SPMD.glob("*.json"))
FORMS = (".opt.pb", ".spmd.pb", ".opt.hlo")


def _sample(name):
    meta = json.loads((SPMD / f"{name}.json").read_text())
    ins = np.load(SPMD / f"{name}.inputs.npz")
    exp = np.load(SPMD / f"{name}.expected.npz")
    return meta, [ins[f"arg{i}"] for i in range(len(ins.files))], \
        [exp[f"out{i}"] for i in range(len(exp.files))]


def test_the_corpus_has_every_kind_of_sample():
    assert {"shard_map_collectives", "shard_map_2dev", "jit_sharded_matmul", "dp_train_step",
            "mesh2d_transformer"} <= set(NAMES)
    assert any(json.loads((SPMD / f"{n}.json").read_text())["devices"] == 2 for n in NAMES)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", NAMES)
def test_run_spmd_matches_xla(name, form):
    meta, args, expected = _sample(name)
    module = load(SPMD / f"{name}{form}").module
    assert module.config.device_count == meta["devices"]
    if form != ".opt.hlo":  # text carries no device assignment; protos do
        ids = [module.config.device_id(0, p) for p in range(meta["devices"])]
        assert ids == meta["device_ids"]
    # The text form does not record the output sharding: take it from the sample's JSON.
    texts = [o["sharding"] for o in meta["outputs"]] if form == ".opt.hlo" else None
    outs = run_spmd(module, args, output_sharding_texts=texts, timeout=60)
    tol = meta["tolerance"]
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"])


def test_mesh_replica_groups_load_from_proto_and_text():
    for form in (".opt.pb", ".opt.hlo"):
        module = load(SPMD / f"dp_train_step{form}").module
        forms = [i.attrs.replica_group_list for c in module.computations for i in c.instructions
                 if i.attrs.replica_group_list is not None]
        assert forms and all(f.groups() == ((0, 1, 2, 3),) for f in forms)


@pytest.mark.parametrize("name", NAMES)
def test_unpartitioned_module_is_refused(name):
    module = load(SPMD / f"{name}.pb").module
    with pytest.raises(InputError, match="not SPMD-partitioned yet.*spmd-partitioning"):
        run_spmd(module, _sample(name)[1])


@pytest.mark.parametrize("mesh,refused", [('"data"=1', False), ('"data"=1, "model"=1', False),
                                         ('"data"=4', True), ('"data"=1, "model"=2', True)])
def test_a_one_device_shardy_mesh_needs_no_partitioning(mesh, refused):
    """XLA leaves a one-device module unpartitioned, with its mesh attribute: it runs as is."""
    from hloc.collectives import unpartitioned_reason

    module = parse_module(f"""HloModule m, frontend_attributes={{xla.sdy.meshes={{mesh = #sdy.mesh<[{mesh}]>}}}}

ENTRY e {{
  p = f32[8] parameter(0)
  ROOT n = f32[8] negate(p)
}}
""")
    assert (unpartitioned_reason(module) is not None) == refused


def test_sharding_annotations_on_global_shapes_are_refused_but_partitioned_modules_pass():
    text = """HloModule m, num_partitions=2

ENTRY e {
  p = f32[8] parameter(0), sharding={devices=[2]<=[2]}
  ROOT n = f32[8] negate(p), sharding={devices=[2]<=[2]}
}
"""
    from hloc.collectives import unpartitioned_reason

    assert "sharding annotations" in unpartitioned_reason(parse_module(text))
    # A partitioned elementwise module: shardings on parameters only, no collectives.
    ok = parse_module(text.replace(", sharding={devices=[2]<=[2]}\n}", "\n}").replace("[8]", "[4]"))
    assert unpartitioned_reason(ok) is None
    outs = run_spmd(ok, [np.arange(8, dtype=np.float32)], output_sharding_texts=["{devices=[2]<=[2]}"])
    assert outs[0].tolist() == (-np.arange(8)).tolist()


def test_replica_id_and_cross_replica_groups():
    text = """HloModule m, replica_count=2, num_partitions=2

add {
  a = u32[] parameter(0)
  b = u32[] parameter(1)
  ROOT s = u32[] add(a, b)
}

ENTRY e {
  r = u32[] replica-id()
  p = u32[] partition-id()
  ten = u32[] constant(10)
  x = u32[] multiply(r, ten)
  v = u32[] add(x, p)
  cr = u32[] all-reduce(v), replica_groups={}, to_apply=add
  crp = u32[] all-reduce(v), channel_id=1, replica_groups={{0,1}}, to_apply=add
  v1 = u32[1] reshape(v)
  g = u32[4] all-gather(v1), channel_id=2, replica_groups=[1,4]<=[2,2]T(1,0), dimensions={0}, use_global_device_ids=true
  ROOT t = (u32[], u32[], u32[4]) tuple(cr, crp, g)
}
"""
    from hloc.runtime.spmd import run_devices

    module = parse_module(text)
    res = run_devices(module, {d: [] for d in [(0, 0), (0, 1), (1, 0), (1, 1)]})
    assert [int(res[d][0]) for d in sorted(res)] == [10, 12, 10, 12]  # sum over replicas
    assert {int(res[d][1]) for d in res} == {22}  # all replicas x all partitions
    assert res[(0, 0)][2].tolist() == [0, 10, 1, 11]  # flattened ids 0,2,1,3


@pytest.mark.parametrize("name", ["shard_map_collectives", "dp_train_step"])
def test_compile_loads_and_verifies_multi_device_modules(name, tmp_path):
    from hloc.compiler import CompileOptions, compile_model

    result = compile_model(str(SPMD / f"{name}.opt.pb"), CompileOptions(target="interpreter"))
    assert result.members and result.manifest["devices"]["count"] == 4
    # cpu and cuda bundles run them too: tests/test_spmd_native.py
