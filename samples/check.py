"""Sanity-check the committed sample corpus against JAX/XLA (dev-only; needs the jax venv).

For every sample (each in a fresh subprocess, like generate.py) this verifies that:

  1. the inputs rebuilt from the generator's fixed seed equal NAME.inputs.npz bit for bit;
  2. lowering again reproduces NAME.pb and NAME.hlo byte for byte, and compiling again
     reproduces NAME.opt.hlo (XLA's optimized module);
  3. ``jax.jit(f)`` run on the stored inputs reproduces NAME.expected.npz bit for bit;
  4. the stored NAME.pb alone (converted with XLA's own HLO->StableHLO importer, compiled
     by the XLA:CPU client and fed the flat arg0, arg1, ... arrays) reproduces
     NAME.expected.npz: the files on their own are a consistent oracle, independent of the
     Python function.  This is usually bit-exact; where XLA fuses the re-imported module
     differently it must stay within the tolerance NAME.json recommends (printed as a note).

Usage:
    /work/jaxenv/bin/python samples/check.py                # all samples
    /work/jaxenv/bin/python samples/check.py --only mlp     # one sample (repeatable)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate as G  # noqa: E402


def load_npz(path: Path, descs: list[dict], prefix: str) -> list[np.ndarray]:
    with np.load(path) as z:
        assert sorted(z.files, key=lambda k: int(k[len(prefix):])) == [f"{prefix}{i}" for i in range(len(descs))], (
            path, z.files)
        arrays = [G.from_storage(z[f"{prefix}{i}"], d["dtype"]) for i, d in enumerate(descs)]
    for i, (a, d) in enumerate(zip(arrays, descs, strict=True)):
        assert list(a.shape) == d["shape"], (path, i, a.shape, d["shape"])
    return arrays


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and G.to_storage(a).tobytes() == G.to_storage(b).tobytes()


def within_tolerance(a: np.ndarray, b: np.ndarray, desc: dict) -> bool:
    """Compare with the tolerance NAME.json recommends (NaNs must match; ints exactly)."""
    if a.shape != b.shape:
        return False
    if desc["rtol"] == 0 and desc["atol"] == 0:
        return same_bits(a, b)
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    return bool(np.allclose(a.astype(wide), b.astype(wide), rtol=desc["rtol"], atol=desc["atol"], equal_nan=True))


def check_one(name: str, root: Path) -> list[str]:
    s = G.SAMPLES[name]
    jax = G.configure_jax(s.x64)
    base = root / name
    f = lambda ext: base.with_name(base.name + ext)  # noqa: E731
    meta = json.loads(f(".json").read_text())
    problems = []

    fn, args, leaves = G.build_sample(s)
    inputs = load_npz(f(".inputs.npz"), meta["params"], "arg")
    expected = load_npz(f(".expected.npz"), meta["outputs"], "out")
    if len(inputs) != len(leaves) or not all(same_bits(a, b) for a, b in zip(inputs, leaves, strict=True)):
        problems.append("inputs differ from the generator's")

    # 2. lowering and compilation are reproducible
    lowered = jax.jit(fn, keep_unused=True, **s.jit_kwargs).lower(*args)
    comp = lowered.compiler_ir("hlo")
    if comp.as_serialized_hlo_module_proto() != f(".pb").read_bytes():
        problems.append(".pb differs on re-lowering")
    if comp.as_hlo_text() != f(".hlo").read_text():
        problems.append(".hlo differs on re-lowering")
    opt = lowered.compile().runtime_executable().hlo_modules()[0]
    if opt.to_string() != f(".opt.hlo").read_text():
        problems.append(".opt.hlo differs on recompiling")

    # 3. jax.jit(f) on the stored inputs
    treedef = jax.tree_util.tree_structure(args)
    outs = jax.jit(fn, keep_unused=True, **s.jit_kwargs)(*jax.tree_util.tree_unflatten(treedef, inputs))
    outs = [np.asarray(o) for o in jax.tree_util.tree_leaves(outs)]
    bad = [i for i, (a, b) in enumerate(zip(outs, expected, strict=False)) if not same_bits(a, b)]
    if len(outs) != len(expected) or bad:
        problems.append(f"jax.jit outputs differ from expected: {bad}")

    # 4. the stored .pb alone, through XLA's HLO importer
    from jax._src import xla_bridge
    from jax._src.lib import _jax, xla_client

    backend = xla_bridge.get_backend("cpu")
    mlir_module = _jax.mlir.hlo_to_stablehlo(f(".pb").read_bytes())
    exe = backend.compile_and_load(mlir_module, backend.devices()[:1], xla_client.CompileOptions())
    bufs = [jax.device_put(a) for a in inputs]
    res = exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
    outs2 = [np.asarray(r[0]) for r in res]
    if len(outs2) != len(expected):
        problems.append(f"standalone .pb gives {len(outs2)} outputs, expected {len(expected)}")
    inexact = [i for i, (a, b) in enumerate(zip(outs2, expected, strict=False)) if not same_bits(a, b)]
    bad = [i for i in inexact if not within_tolerance(outs2[i], expected[i], meta["outputs"][i])]
    if bad:
        problems.append(f"standalone .pb outputs outside the recommended tolerance: {bad}")
    elif inexact:
        # XLA re-importing the HLO can fuse/reassociate differently: not bit-exact, but within tolerance.
        print(f"  {name}: note: standalone .pb outputs {inexact} within tolerance but not bit-exact")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description="verify the sample corpus is reproducible")
    ap.add_argument("--only", action="append")
    ap.add_argument("--out", default=str(G.HERE), help="samples directory")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    root = Path(a.out)
    if a.worker:
        problems = check_one(a.worker, root)
        for p in problems:
            print(f"  {a.worker}: {p}")
        return 1 if problems else 0
    names = [n for n in G.SAMPLES if (root / f"{n}.json").exists()]
    if a.only:
        names = [n if n in G.SAMPLES else "ops/" + n for n in a.only]
    failed = G.run_all(names, root, a.jobs, script=str(Path(__file__).resolve()), label="check")
    print(f"check: {len(names) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
