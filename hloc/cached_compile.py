"""The compile cache's key, and `hloc compile` served from the cache when it can be.

The key is a sha256 over everything that determines a bundle's bytes:

- the canonical module: the loaded module serialized by hloc's own exporter (deterministic
  protobuf), its config (replica count, partitions, seed, entry layout) and an HloSnapshot's
  arguments. The file's path and its wrapper form (HloModuleProto, HloProto,
  HloModuleProtoWithConfig with the same config, HloSnapshot with the same arguments) do not
  enter it. HLO text and a binary proto of one module key differently: the text parser
  assigns its own instruction ids, which the bundle's module.pb records;
- the options that affect output: `CompileOptions.manifest_flags()` (target, -O level, CPU,
  features, pass spec, disabled passes) and the contents of a `--pipeline` file;
- the resolved target: the CPU target with the host's CPU name and full feature set (so two
  machines with different CPUs never share a host-targeted entry), or the CUDA archs and the
  ptxas that assembles them;
- the compiler: hloc's version, a fingerprint of its sources (a development tree or a
  reinstall of the same version with other code never hits stale entries), the cache format
  version, and the Python, NumPy, protobuf and LLVM versions.

The manifest's input digest and form (of the file itself) are not part of the key: a hit
fills them in from the file being compiled, so a hit writes exactly the bytes a fresh compile
of that file would.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys

from . import __version__, compile_cache

log = logging.getLogger("hloc.compile_cache")

CACHE_FORMAT = "1"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _source_files() -> list[tuple[str, os.stat_result]]:
    found = []
    for directory, dirs, files in os.walk(_PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [(os.path.join(directory, f), os.stat(os.path.join(directory, f)))
                  for f in sorted(files) if f.endswith(".py")]
    return found


def _hash_sources(files: list[tuple[str, os.stat_result]]) -> str:
    h = hashlib.sha256()
    for path, _ in files:
        h.update(os.path.relpath(path, _PACKAGE_DIR).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


@functools.cache
def source_fingerprint() -> str:
    """sha256 of hloc's Python sources, memoized on disk by the files' (size, mtime) and in
    this process (one walk of the package per process, not one per compile)."""
    files = _source_files()
    stamp = hashlib.sha256(repr([(os.path.relpath(p, _PACKAGE_DIR), s.st_size, s.st_mtime_ns)
                                 for p, s in files]).encode()).hexdigest()
    memo = compile_cache.entry_path(f"sources-{stamp}")
    try:
        with open(memo or "", encoding="ascii") as f:
            cached = f.read().strip()
        if len(cached) == 64:
            return cached
    except OSError:
        pass
    fingerprint = _hash_sources(files)
    if memo:
        compile_cache.write_file(memo, fingerprint)
    return fingerprint


def _toolchain(target: str) -> list[str]:
    import google.protobuf
    import numpy

    parts = [f"python {sys.version_info[0]}.{sys.version_info[1]}", f"numpy {numpy.__version__}",
             f"protobuf {google.protobuf.__version__}"]
    if target != "interpreter":
        import llvmlite
        import llvmlite.binding

        parts += [f"llvmlite {llvmlite.__version__}",
                  "llvm " + ".".join(map(str, llvmlite.binding.llvm_version_info))]
    return parts


def _target_description(options) -> str:
    """The resolved target: host CPU name and features included."""
    if options.target == "cpu":
        from .codegen.target import cpu_target

        return repr(cpu_target(options.cpu, options.cpu_features))
    if options.target == "cuda":
        from .codegen.cuda.ptxas import find_ptxas

        ptxas = find_ptxas()
        stat = os.stat(ptxas) if ptxas else None
        identity = f"{ptxas} {stat.st_size} {stat.st_mtime_ns}" if stat else "no ptxas"
        return f"cuda {list(options.cuda_archs)} {identity}"
    return options.target


def _canonical_module(loaded) -> list[bytes]:
    from .frontend import literal_to_bytes, module_to_proto

    module = loaded.module
    parts = [module_to_proto(module).SerializeToString(deterministic=True),
             repr(module.config).encode()]
    parts += [literal_to_bytes(a) for a in loaded.arguments or ()]
    return parts


def compile_key(loaded, options) -> str:
    """The cache key of compiling `loaded` (a LoadedModel, before any pass ran) with `options`."""
    from .compiler import read_file

    pipeline = b""
    if options.pipeline_file:
        pipeline = read_file(options.pipeline_file, "pipeline")
    parts = [f"hloc compile cache {CACHE_FORMAT}", f"hloc {__version__}", source_fingerprint(),
             *_toolchain(options.target), json.dumps(options.manifest_flags()),
             _target_description(options)]
    h = hashlib.sha256()
    for part in [*(p.encode() for p in parts), hashlib.sha256(pipeline).digest(),
                 *_canonical_module(loaded)]:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def compile_cached(path: str, options, progress=None) -> tuple[dict, dict[str, bytes]]:
    """(manifest, members) of compiling `path`: from the cache when the key is there, else
    compiled and stored. The caller decides whether the cache may be used (see the CLI)."""
    from .compiler import compile_model, input_section, read_file
    from .frontend import load_bytes

    data = read_file(path, "model")
    loaded = load_bytes(data, path)
    key = compile_key(loaded, options)
    entry = compile_cache.lookup(key)
    if entry is not None:
        log.debug("compile cache hit %s", key)
        manifest, members = entry
        # The module name is the compiled module's (a function of the key); the file's own
        # digest and form are this file's.
        manifest["input"].update(input_section(data, loaded, manifest["input"]["module_name"]))
        return manifest, members
    result = compile_model(path, options, data=data, loaded=loaded, key=key, progress=progress)
    members = {name: _as_bytes(blob) for name, blob in result.members.items()}
    compile_cache.store(key, result.manifest, members)
    return result.manifest, members


def _as_bytes(blob) -> bytes:
    """A member as bytes (members may also be iterables of chunks)."""
    if isinstance(blob, bytes | bytearray | memoryview):
        return bytes(blob)
    return b"".join(blob)
