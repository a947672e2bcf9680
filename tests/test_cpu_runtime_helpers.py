"""Shared helpers for the CPU backend tests (no tests here): model → CPU bundle → executable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import hloc.runtime.cpu  # noqa: F401  (registers the "cpu" device)
from hloc.bundle import read_bundle, write_bundle
from hloc.codegen.cpu.compile import build_cpu_bundle_contents
from hloc.compiler import CompileOptions, run_passes
from hloc.frontend import load
from hloc.ir import Module
from hloc.ir.parser import parse_module
from hloc.runtime import load as load_bundle
from hloc.runtime.interpreter import evaluate


def optimized(model, options: CompileOptions) -> Module:
    """A model path, HLO text or Module after the -O pipeline of `options`."""
    if isinstance(model, Module):
        module = model
    elif isinstance(model, str) and "HloModule" in model:
        module = parse_module(model)
    else:
        module = load(model).module
    run_passes(module, options, None)
    return module


def compile_to_bundle(model, path: Path, *, cpu: str | None = None, features: str | None = None,
                      opt_level: int = 2, passes: str | None = None,
                      edit_manifest=None) -> Path:
    """Compile like `hloc compile --target cpu` (via build_cpu_bundle_contents) to `path`."""
    options = CompileOptions(target="cpu", opt_level=opt_level, cpu=cpu, cpu_features=features,
                             passes=passes)
    module = optimized(model, options)
    manifest, members = build_cpu_bundle_contents(module, options)
    if edit_manifest is not None:
        edit_manifest(manifest)
    write_bundle(path, manifest=manifest, members=members)
    return path


def load_cpu(path: Path):
    return load_bundle(str(path), "cpu")


def members(path: Path) -> dict[str, bytes]:
    b = read_bundle(path)
    return {name: bytes(b.members[name]) for name in b.members}


def kernels_json(path: Path) -> dict:
    return json.loads(members(path)["kernels.json"])


def reference(text: str, args: list[np.ndarray]) -> list[np.ndarray]:
    """The reference interpreter's results for an HLO text module (unoptimized)."""
    return evaluate(parse_module(text), args).flatten()


def run_text(text: str, args: list[np.ndarray], tmp: Path, **kw) -> tuple[list, list]:
    """(CPU results, interpreter results) of an HLO text module."""
    bundle = compile_to_bundle(text, tmp / "m.bundle", **kw)
    return load_cpu(bundle).run(args), reference(text, args)


def assert_close(got, want, rtol=1e-5, atol=1e-6, what="") -> None:
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, i, g.shape, w.shape, g.dtype,
                                                           w.dtype)
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{what} out{i}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=atol, equal_nan=True, err_msg=f"{what} out{i}")
