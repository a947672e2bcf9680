"""Generate the whole-model samples (samples/models/): Keras 3 (JAX backend) and keras-hub
models with random weights, lowered by JAX with every weight an entry PARAMETER.

For each model NAME it writes NAME.pb (the unoptimized HloModuleProto hloc compiles),
NAME.opt.pb (XLA:CPU's optimized module; text .hlo/.opt.hlo only when small), NAME.json
(every parameter's dtype, shape and numpy `init` recipe, outputs, tolerance, XLA's memory
statistics and compile time) and NAME.expected.npz (XLA:CPU's outputs for the arguments that
weights.py regenerates from the JSON and seed). No weights or inputs are stored.

Dev only (needs jax, keras and keras-hub; see the Makefile's jax venv):

    KERAS_BACKEND=jax .jaxenv/bin/python samples/models/generate.py [--only NAME] [--list]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
os.environ.setdefault("KERAS_BACKEND", "jax")

import weights  # noqa: E402  (numpy only)
from model_zoo import MODELS  # noqa: E402

TEXT_LIMIT = 256 * 1024  # write .hlo / .opt.hlo only below this many bytes


def _xla_dtype(dtype) -> str:
    return {v: k for k, v in weights.NUMPY.items()}[np.dtype(dtype).type]


def _sig(x: float) -> float:
    return float(f"{float(x):.4g}")


def recipe(value: np.ndarray) -> dict:
    """An init recipe that draws arrays like `value` (Keras's own initial value)."""
    if value.dtype.kind in "biu":
        if value.size <= 16:
            return {"dist": "values", "values": value.ravel().tolist()}
        return {"dist": "ints", "lo": int(value.min()), "hi": int(value.max()) + 1}
    mean, std = _sig(value.mean()), _sig(value.std())
    if std == 0.0:  # constant initializers (BN, biases): perturb so none is an identity
        std = _sig(0.05 * max(1.0, abs(mean)))
    return {"dist": "normal", "mean": mean, "std": std}


def _param(name: str, value, init: dict | None = None) -> dict:
    value = np.asarray(value)
    return {"name": name, "dtype": _xla_dtype(value.dtype), "shape": list(value.shape),
            "init": init or recipe(value)}


def keras_params(variables) -> list[dict]:
    """Parameter entries for Keras variables, in order."""
    return [_param("w:" + v.path, v.value) for v in variables]


def _corpus():
    """samples/generate.py as a module: its npz, JSON and histogram helpers."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sample_corpus", HERE.parent / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sample_corpus"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _write(name: str, fn, params: list[dict], description: str, rtol: float) -> None:
    import jax
    import keras

    meta = {"name": name, "description": description,
            "seed": zlib.crc32(name.encode()) & 0x7FFFFFFF, "params": params}
    args = weights.arrays(meta)
    lowered = jax.jit(fn, keep_unused=True).lower(*args)
    comp = lowered.compiler_ir("hlo")
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    outs = [np.asarray(o) for o in jax.tree_util.tree_leaves(compiled(*args))]
    opt = compiled.runtime_executable().hlo_modules()[0]
    files = {".pb": comp.as_serialized_hlo_module_proto(),
             ".opt.pb": opt.as_serialized_hlo_module_proto()}
    for suffix, text in ((".hlo", comp.as_hlo_text()), (".opt.hlo", opt.to_string())):
        if len(text) < TEXT_LIMIT:
            files[suffix] = text.encode()
    for suffix, data in files.items():
        (HERE / f"{name}{suffix}").write_bytes(data)
    corpus = _corpus()
    corpus.save_npz(HERE / f"{name}.expected.npz", {f"out{i}": o for i, o in enumerate(outs)})
    mem = compiled.memory_analysis()
    hist = corpus.opcode_histogram(comp.as_hlo_text())
    opt_instrs = corpus.hlo_instructions(opt.to_string())
    meta.update({
        "jax_version": jax.__version__, "keras_version": keras.__version__,
        "outputs": [{"dtype": _xla_dtype(o.dtype), "shape": list(o.shape)} for o in outs],
        "tolerance": {"rtol": rtol, "atol": _sig(rtol * max(float(np.abs(o).max()) for o in outs))},
        "instruction_count": sum(hist.values()),
        "xla_opt_instruction_count": len(opt_instrs),
        "xla_fusion_count": sum(1 for _, _, op in opt_instrs if op == "fusion"),
        "xla_temp_bytes": int(mem.temp_size_in_bytes),
        "xla_argument_bytes": int(mem.argument_size_in_bytes),
        "xla_output_bytes": int(mem.output_size_in_bytes),
        "xla_compile_seconds": round(compile_s, 3),
        "weight_count": int(sum(np.prod(p["shape"]) for p in params if p["name"].startswith("w:"))),
        "opcodes": dict(sorted(hist.items())),
    })
    (HERE / f"{name}.json").write_text(corpus.dump_json(meta))
    print(f"{name}: {meta['instruction_count']} instructions, {len(files['.pb'])} bytes")


def run_one(name: str) -> None:
    """Build, lower, compile, run and write one model (call in a fresh process)."""
    import jax
    import keras

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_hlo_source_file_canonicalization_regex", r".*/")
    jax.config.update("jax_traceback_in_locations_limit", 1)
    keras.utils.set_random_seed(0)
    description, build, rtol = MODELS[name]
    fn, params = build(sys.modules[__name__])
    _write(name, fn, params, description, rtol)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.list:
        print("\n".join(MODELS))
        return 0
    if args.worker:
        run_one(args.worker)
        return 0
    status = 0
    for name in args.only or list(MODELS):  # one fresh process each: module ids start at 0
        status |= subprocess.call([sys.executable, __file__, "--worker", name],
                                  env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return status


if __name__ == "__main__":
    sys.exit(main())
