"""One way to test a backend: compile small HLO modules, run them on the backend, compare
each result with the reference interpreter's.

Backends:
- "cpu": `hloc compile --target cpu` (passes, plan, one object) and the CPU runtime;
- "cpu-kernels": the entry computation of every case as one kernel, all cases in one
  object (the emitter alone, no passes: one LLVM compile for many cases);
- "cuda-emulated": `hloc compile --target cuda` and the CUDA emulator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hloc.ir.text.parser import parse_module
from hloc.runtime.interpreter import evaluate

from . import kernels
from .bundles import compile_bundle, load_cpu, load_emulated
from .values import assert_matches, assert_same_bits

BACKENDS = ("cpu", "cpu-kernels", "cuda-emulated")
Case = tuple[str, list]  # (HLO text, inputs)


@dataclass
class Outcome:
    """A case's backend results, the interpreter's, and what ran it: the bundle path
    ("cpu"), the emulated executable ("cuda-emulated") or None ("cpu-kernels")."""

    got: list[np.ndarray]
    want: list[np.ndarray]
    artifact: object = None


def interpret(text: str, args) -> list[np.ndarray]:
    """The reference interpreter's results for an HLO text module (unoptimized)."""
    return evaluate(parse_module(text), args).flatten()


def run_cases(cases: Mapping[str, Case], backend: str = "cpu", *, tmp: Path | None = None,
              **options) -> dict[str, Outcome]:
    """Run every case on `backend` and the interpreter. `options` are CompileOptions fields
    (bundle backends); "cpu" writes its bundles under `tmp`."""
    if backend == "cpu-kernels":
        return _run_kernels(cases, **options)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    out = {}
    for n, (key, (text, args)) in enumerate(cases.items()):
        want = interpret(text, args)
        if backend == "cpu":
            assert tmp is not None, "the cpu backend writes bundles: pass tmp=tmp_path"
            artifact = compile_bundle(text, Path(tmp) / f"case{n}.bundle", **options)
            got = load_cpu(artifact).run(args)
        else:
            artifact = load_emulated(text, **options)
            got = artifact.run(args)
        out[key] = Outcome([np.asarray(g) for g in got], want, artifact)
    return out


def _run_kernels(cases: Mapping[str, Case], opt_level: int = 2) -> dict[str, Outcome]:
    modules = {key: parse_module(text) for key, (text, _) in cases.items()}
    names = {key: f"k{n}" for n, key in enumerate(cases)}
    compiled = kernels.Compiled([kernels.entry_spec(m, names[k]) for k, m in modules.items()],
                                opt_level)
    return {key: Outcome(compiled.run(names[key], args),
                         kernels.reference(modules[key].entry, args))
            for key, (_, args) in cases.items()}


def compare_with_interpreter(cases: Mapping[str, Case], backend: str = "cpu", *,
                             rtol: float = 0.0, atol: float = 0.0, bits: bool = False,
                             tmp: Path | None = None, **options) -> dict[str, Outcome]:
    """run_cases, then assert every output matches the interpreter's: the same shape and
    dtype, and values within `rtol`/`atol` (exact, signs of zeros included, when both are
    0; NaN where the interpreter has NaN), or the same bits, NaN payloads included (`bits`).
    Returns the outcomes for further checks."""
    outcomes = run_cases(cases, backend, tmp=tmp, **options)
    for key, o in outcomes.items():
        if bits:
            assert_same_bits(o.got, o.want, str(key))
            continue
        assert len(o.got) == len(o.want), key
        for i, (g, w) in enumerate(zip(o.got, o.want, strict=True)):
            g, w = np.asarray(g), np.asarray(w)
            assert g.dtype == w.dtype, (key, i, g.dtype, w.dtype)
            assert_matches(g, w, rtol=rtol, atol=atol, what=f"{key} out{i}")
    return outcomes


def emulate_hlo(text: str, inputs, **options):
    """(emulated outputs, interpreter outputs, executable) of HLO text on `inputs`."""
    o = run_cases({"case": (text, inputs)}, "cuda-emulated", **options)["case"]
    return o.got, o.want, o.artifact
