"""Generate hloc's multi-device samples: SPMD-partitioned JAX modules with XLA's global outputs.

Run with JAX on forced host devices (JAX is a dev-only dependency):

    XLA_FLAGS=--xla_force_host_platform_device_count=4 /work/jaxenv/bin/python samples/generate_dist.py
    ... samples/generate_dist.py --only dp_train_step      # one sample
    ... samples/generate_dist.py --list

For every sample NAME it writes into ``samples/spmd/`` (the benchmark-size ``dp_scaling_nN``
steps into ``benchmarks/cases/spmd/``, where the sample tests do not run them):

  NAME.pb            the UNPARTITIONED module JAX lowers (Shardy ``xla.sdy.*`` attributes,
                     global shapes): what hloc must refuse, pointing at the files below
  NAME.opt.pb        XLA:CPU's optimized module (``compiled.runtime_executable().hlo_modules()[0]``):
  NAME.opt.hlo       per-device shapes, collectives; as HloModuleProto and as text
  NAME.spmd.pb       the HloProto XLA dumps right after the ``spmd-partitioning`` pass
                     (none for a one-device module: XLA does not partition it)
  NAME.inputs.npz    arg0, arg1, ...: the GLOBAL arrays the JAX user passed
  NAME.expected.npz  out0, out1, ...: XLA's GLOBAL outputs (the assembled jax.Array values)
  NAME.json          devices, device ids, mesh, each parameter's and output's sharding, tolerance

Determinism: inputs come from ``numpy.random.default_rng(crc32(seed))`` (seed: the name, or the
family's name for samples sharing inputs); each sample runs in a
fresh subprocess (module id 0) with checkout-independent source locations, as generate.py does.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH_DIR = HERE.parent / "benchmarks" / "cases" / "spmd"
sys.path.insert(0, str(HERE))
from generate import configure_jax, dump_json, save_npz, xla_dtype_name  # noqa: E402


@dataclass
class DistSample:
    name: str
    description: str
    devices: int
    build: object  # (rng, jax devices) -> (jitted fn, global numpy args)
    rtol: float = 1e-5
    atol: float = 1e-5
    seed: str = ""  # default: the name
    out_dir: Path = HERE / "spmd"  # where it is written unless --out says otherwise


DIST: dict[str, DistSample] = {}


def dist_sample(name: str, description: str, devices: int, **kw):
    def deco(build):
        DIST[name] = DistSample(name, description, devices, build, **kw)
        return build
    return deco


def _mesh(devs, shape, names):
    from jax.sharding import Mesh
    return Mesh(np.array(devs).reshape(shape), names)


# ---- samples -----------------------------------------------------------------------------------
@dist_sample("shard_map_collectives", "shard_map over 4 devices with psum, pmax, pmin, all_gather, "
             "psum_scatter, ppermute, all_to_all and axis_index", 4)
def _shard_map_collectives(rng, devs):
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P
    mesh = _mesh(devs[:4], (4,), ("x",))

    @partial(jax.shard_map, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"))
    def body(a, b):
        i = jax.lax.axis_index("x")
        s = jax.lax.psum(a, "x")
        hi = jax.lax.pmax(b, "x")
        lo = jax.lax.pmin(a * b, "x")
        g = jax.lax.all_gather(a, "x", tiled=True)           # [8,4]
        rs = jax.lax.psum_scatter(jnp.concatenate([a, b, a - b, a * b]), "x",
                                  scatter_dimension=0, tiled=True)
        pp = jax.lax.ppermute(b, "x", [(0, 1), (1, 2), (2, 3), (3, 0)])
        half = jax.lax.ppermute(a, "x", [(0, 2), (1, 3)])     # devices 0, 1 receive zeros
        a2a = jax.lax.all_to_all(jnp.tile(a, (4, 1)) * (i + 1), "x", 0, 0, tiled=True)
        return s + hi - lo + g[2:4] * g[6:8] + rs + pp + half + a2a[0:2] + i.astype(a.dtype)

    return jax.jit(body), (rng.standard_normal((8, 4), np.float32),
                           rng.standard_normal((8, 4), np.float32))


@dist_sample("shard_map_2dev", "shard_map over 2 devices (global ids 3 and 1, not contiguous): "
             "psum, ppermute swap, all_gather, axis_index", 2)
def _shard_map_2dev(rng, devs):
    import jax
    from jax.sharding import PartitionSpec as P
    mesh = _mesh([devs[3], devs[1]], (2,), ("x",))

    @partial(jax.shard_map, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P()))
    def body(a):
        i = jax.lax.axis_index("x").astype(a.dtype)
        swapped = jax.lax.ppermute(a, "x", [(0, 1), (1, 0)])
        total = jax.lax.psum(jax.numpy.sum(a * a), "x")
        return swapped * (i + 2) + jax.lax.all_gather(a, "x", tiled=True)[:2], total

    return jax.jit(body), (rng.standard_normal((4, 3), np.float32),)


@dist_sample("jit_sharded_matmul", "jit with NamedSharding inputs over 4 devices; the partitioner "
             "makes the collectives (contracting-dim sharded matmul, resharded output)", 4)
def _jit_sharded_matmul(rng, devs):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    mesh = _mesh(devs[:4], (4,), ("x",))
    shard = partial(NamedSharding, mesh)

    def f(x, w, v):
        y = jnp.tanh(x @ w)                      # x: cols sharded, w: rows sharded -> all-reduce
        return y, jnp.sum(v * 2.0, axis=0)       # v rows sharded -> reduction across devices

    jitted = jax.jit(f, in_shardings=(shard(P(None, "x")), shard(P("x", None)), shard(P("x"))),
                     out_shardings=(shard(P("x", None)), shard(P())))
    return jitted, (rng.standard_normal((8, 16), np.float32),
                    rng.standard_normal((16, 8), np.float32),
                    rng.standard_normal((8, 6), np.float32))


def _dp_step(rng, devs, n: int, batch: int, d_in: int, hidden: int, d_out: int):
    """An MLP's SGD step, data-parallel over `n` devices: batch sharded, params replicated,
    gradients all-reduced (by the partitioner)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    mesh = _mesh(devs[:n], (n,), ("data",))
    rep, batched = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    def loss(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    def step(p, x, y):
        value, grads = jax.value_and_grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, g: a - 0.1 * g, p, grads), value

    params = {"b1": np.zeros(hidden, np.float32),
              "w1": (rng.standard_normal((d_in, hidden)) * 0.3).astype(np.float32),
              "w2": (rng.standard_normal((hidden, d_out)) * 0.3).astype(np.float32)}
    jitted = jax.jit(step, in_shardings=(rep, batched, batched), out_shardings=(rep, rep))
    return jitted, (params, rng.standard_normal((batch, d_in), np.float32),
                    rng.standard_normal((batch, d_out), np.float32))


@dist_sample("dp_train_step", "data-parallel MLP training step on 4 devices: batch sharded, params "
             "replicated, gradient all-reduce, SGD update", 4, rtol=1e-4, atol=1e-5)
def _dp_train_step(rng, devs):
    return _dp_step(rng, devs, 4, batch=16, d_in=8, hidden=16, d_out=4)


# The scaling benchmark's inputs (benchmarks/bench_scaling.py): the same step at a size that
# takes milliseconds (global batch 1024, MLP 64-512-8: about 0.25 GFLOP a step) on 1, 2 and
# 4 devices, with the same global inputs (strong scaling: a fixed global batch).
DP_SCALING = {"batch": 1024, "d_in": 64, "hidden": 512, "d_out": 8}


def _dp_scaling(n: int):
    def build(rng, devs):
        return _dp_step(rng, devs, n, **DP_SCALING)
    return build


for _n in (1, 2, 4):
    dist_sample(f"dp_scaling_n{_n}", f"the dp_train_step MLP at benchmark size (global batch "
                f"{DP_SCALING['batch']}, 64-512-8) on {_n} device(s)", _n, rtol=1e-4, atol=1e-5,
                seed="dp_scaling", out_dir=BENCH_DIR)(_dp_scaling(_n))


@dist_sample("mesh2d_transformer", "2-D mesh (data=2 x model=2) transformer layer: attention "
             "heads and MLP sharded over 'model', batch over 'data'; all-reduces within one axis",
             4, rtol=1e-4, atol=1e-5)
def _mesh2d_transformer(rng, devs):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    mesh = _mesh(devs[:4], (2, 2), ("data", "model"))
    s = partial(NamedSharding, mesh)
    d, heads, hd, ff = 8, 4, 2, 16

    def layer(x, wqkv, wo, w1, w2):
        b, t, _ = x.shape
        qkv = jnp.einsum("btd,dkhe->kbthe", x, wqkv)
        att = jax.nn.softmax(jnp.einsum("bthe,bshe->bhts", qkv[0], qkv[1]) / np.sqrt(hd), -1)
        o = jnp.einsum("bhts,bshe->bthe", att, qkv[2])
        x = x + jnp.einsum("bthe,hed->btd", o, wo)
        mu = jnp.mean(x, -1, keepdims=True)
        xn = (x - mu) * jax.lax.rsqrt(jnp.var(x, -1, keepdims=True) + 1e-5)
        return x + jax.nn.gelu(xn @ w1) @ w2

    ins = (s(P("data")), s(P(None, None, "model")), s(P("model")), s(P(None, "model")),
           s(P("model", None)))
    jitted = jax.jit(layer, in_shardings=ins, out_shardings=s(P("data")))
    sc = 0.3
    return jitted, (rng.standard_normal((4, 3, d), np.float32),
                    (rng.standard_normal((d, 3, heads, hd)) * sc).astype(np.float32),
                    (rng.standard_normal((heads, hd, d)) * sc).astype(np.float32),
                    (rng.standard_normal((d, ff)) * sc).astype(np.float32),
                    (rng.standard_normal((ff, d)) * sc).astype(np.float32))


# ---- worker and driver ---------------------------------------------------------------------------
def _sharding_text(sharding, ndim: int) -> str:
    return str(sharding._to_xla_hlo_sharding(ndim))


def _spmd_dump(dump_dir: str, devices: int) -> bytes | None:
    found = sorted(glob.glob(os.path.join(dump_dir, "*after_spmd-partitioning*.pb")))
    assert found or devices == 1, f"no spmd-partitioning dump in {dump_dir}"
    return Path(found[0]).read_bytes() if found else None


def _describe(a, sharding) -> dict:
    return {"dtype": xla_dtype_name(a.dtype), "shape": list(a.shape),
            "sharding": _sharding_text(sharding, a.ndim)}


def run_worker(name: str, out_root: Path | None, dump_dir: str) -> None:
    s = DIST[name]
    jax = configure_jax(False)
    devs = jax.devices()
    assert len(devs) >= 4, "set XLA_FLAGS=--xla_force_host_platform_device_count=4"
    seed = zlib.crc32((s.seed or name).encode()) & 0x7FFFFFFF
    jitted, args = s.build(np.random.default_rng(seed), devs)
    leaves = jax.tree_util.tree_leaves(args)
    lowered = jitted.lower(*args)
    compiled = lowered.compile()
    opt = compiled.runtime_executable().hlo_modules()[0]
    outs = [np.asarray(o) for o in jax.tree_util.tree_leaves(compiled(*args))]
    in_sh = jax.tree_util.tree_leaves(compiled.input_shardings[0])
    out_sh = jax.tree_util.tree_leaves(compiled.output_shardings)
    base = (out_root or s.out_dir) / name
    base.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{base}.pb").write_bytes(lowered.compiler_ir("hlo").as_serialized_hlo_module_proto())
    Path(f"{base}.opt.pb").write_bytes(opt.as_serialized_hlo_module_proto())
    Path(f"{base}.opt.hlo").write_text(opt.to_string())
    spmd = _spmd_dump(dump_dir, s.devices)
    if spmd is not None:
        Path(f"{base}.spmd.pb").write_bytes(spmd)
    save_npz(Path(f"{base}.inputs.npz"), {f"arg{i}": a for i, a in enumerate(leaves)})
    save_npz(Path(f"{base}.expected.npz"), {f"out{i}": a for i, a in enumerate(outs)})
    meta = {
        "name": name, "description": s.description, "jax_version": jax.__version__,
        "devices": s.devices,
        "device_ids": [d.id for d in in_sh[0]._device_assignment],
        "mesh": {k: int(v) for k, v in in_sh[0].mesh.shape.items()}
        if hasattr(in_sh[0], "mesh") else None,
        "params": [_describe(a, sh) for a, sh in zip(leaves, in_sh, strict=True)],
        "outputs": [_describe(o, sh) for o, sh in zip(outs, out_sh, strict=True)],
        "tolerance": {"rtol": s.rtol, "atol": s.atol},
    }
    Path(f"{base}.json").write_text(dump_json(meta))


def _spawn(name: str, out_root: str | None) -> int:
    with tempfile.TemporaryDirectory() as dump:
        flags = (f"--xla_force_host_platform_device_count=4 --xla_dump_to={dump} "
                 "--xla_dump_hlo_pass_re=spmd-partitioning --xla_dump_hlo_as_proto")
        env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
        cmd = [sys.executable, __file__, "--worker", name, "--dump", dump,
               *(["--out", out_root] if out_root else [])]
        return subprocess.run(cmd, env=env).returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write every sample here (default: samples/spmd, "
                    "benchmarks/cases/spmd for the benchmark's)")
    ap.add_argument("--only", action="append")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--worker")
    ap.add_argument("--dump")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(DIST))
        return 0
    if a.worker:
        run_worker(a.worker, Path(a.out) if a.out else None, a.dump)
        return 0
    failed = [n for n in (a.only or list(DIST)) if _spawn(n, a.out) != 0]
    for n in a.only or list(DIST):
        print(f"[generate_dist] {n}: {'FAILED' if n in failed else 'ok'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
