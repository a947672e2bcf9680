"""Bundles in tests, built exactly as `hloc compile` builds them (hloc.compiler), then loaded
on a runtime: the CPU runtime or the CUDA emulator.

A model is a path (any input form), HLO text, or a Module (compiled in place).
"""

from __future__ import annotations

import collections
import json
import tempfile
from pathlib import Path

import hloc.runtime.cpu  # noqa: F401  (registers the "cpu" device)
from hloc.bundle import read_bundle, write_bundle
from hloc.compiler import CompileOptions, CompileResult, compile_model, compile_module
from hloc.dump import DumpManager, DumpOptions
from hloc.ir import Module
from hloc.runtime import load as load_bundle


def compile_result(model, options: CompileOptions, dump_dir: Path | None = None
                   ) -> CompileResult:
    """compile_model for a path or HLO text (hashed like the file it would be), compile_module
    for a Module."""
    dump = DumpOptions(str(dump_dir)) if dump_dir is not None else None
    if isinstance(model, Module):
        manager = DumpManager(dump, model.name) if dump else None
        result = compile_module(model, options, dump=manager)
        if manager:
            manager.finish()
        return result
    if isinstance(model, str) and "HloModule" in model:
        return compile_model("<text>", options, dump_options=dump, data=model.encode())
    return compile_model(str(model), options, dump_options=dump)


def compile_bundle(model, path: Path | str, *, target: str = "cpu", edit_manifest=None,
                   dump_dir: Path | None = None, **options) -> Path:
    """Compile `model` like `hloc compile --target <target>` into the bundle at `path`.
    `options` are CompileOptions fields (cpu, cpu_features, opt_level, passes, cuda_archs);
    `edit_manifest(manifest)` may change the manifest before it is written (fault tests)."""
    result = compile_result(model, CompileOptions(target=target, **options), dump_dir)
    if edit_manifest is not None:
        edit_manifest(result.manifest)
    write_bundle(path, manifest=result.manifest, members=result.members)
    return Path(path)


def sample_bundle(model: Path | str, path: Path | str, **options) -> Path:
    """compile_bundle for a model file, through hloc's compile cache (the suite's own, one per
    session and shared by the xdist workers: tests/conftest.py): the tests that check other
    properties of a sample's default bundle (native dots, no fallbacks, ...) and
    test_cpu_samples compile it once between them. A hit is byte for byte the bundle a fresh
    compile writes (test_compile_cache). Only for a compiler nobody patched: the cache key
    sees the module, the options and hloc's sources, not a monkeypatched registry."""
    from hloc.cached_compile import compile_cached

    manifest, members = compile_cached(str(model), CompileOptions(**options))
    write_bundle(path, manifest=manifest, members=members)
    return Path(path)


def load_cpu(path: Path):
    return load_bundle(str(path), "cpu")


def load_emulated(model, **options):
    """Compile `model` for CUDA into a temporary bundle and load it on the emulator."""
    from hloc.runtime.cuda.emulated import CudaEmulatedExecutable

    with tempfile.TemporaryDirectory(prefix="hloc-cuda-") as tmp:
        path = compile_bundle(model, Path(tmp) / "m.bundle", target="cuda", **options)
        return CudaEmulatedExecutable(read_bundle(path))


def members(path: Path) -> dict[str, bytes]:
    b = read_bundle(path)
    return {name: bytes(b.members[name]) for name in b.members}


def kernels_json(path: Path) -> dict:
    return json.loads(members(path)["kernels.json"])


def dumped(dump_dir: Path, suffix: str) -> bytes:
    """The one dump file whose name ends with `suffix` (e.g. "cpu.module.s")."""
    found = sorted(Path(dump_dir).glob(f"*{suffix}"))
    assert len(found) == 1, (suffix, found)
    return found[0].read_bytes()


def variants(ex) -> collections.Counter:
    """How many emulated CUDA kernels use each kernel variant."""
    return collections.Counter(r.variant for r in ex.program.kernels)
