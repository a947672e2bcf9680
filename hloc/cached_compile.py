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

Finding the key needs the module loaded (the frontend, the IR, NumPy) and the toolchain and
host CPU asked (llvmlite): most of a cache hit's time. So a file compiled before is first
looked up by `file_key`, a key of its bytes and of cheap stand-ins for the rest (the
toolchain's installed versions, /proc/cpuinfo), which an alias maps to the compile key it led
to; a hit that way imports none of the compiler (tests/test_compile_cache.py checks).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys

from . import __version__, compile_cache
from .util.log import get_logger
from .util.sources import relative, source_files, stat_listing

log = get_logger("hloc.compile_cache")

CACHE_FORMAT = "1"


def _hash_sources(files: list[tuple[str, os.stat_result]]) -> str:
    h = hashlib.sha256()
    for path, _ in files:
        h.update(relative(path).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


@functools.cache
def source_fingerprint() -> str:
    """sha256 of hloc's Python sources, memoized on disk by the files' (size, mtime) and in
    this process (one walk of the package per process, not one per compile)."""
    files = source_files()
    stamp = hashlib.sha256(stat_listing(files).encode()).hexdigest()
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

    parts = [f"python {sys.version_info[0]}.{sys.version_info[1]}", _numpy_version(),
             f"protobuf {google.protobuf.__version__}"]
    if target != "interpreter":
        import llvmlite
        import llvmlite.binding

        parts += [f"llvmlite {llvmlite.__version__}",
                  "llvm " + ".".join(map(str, llvmlite.binding.llvm_version_info))]
    return parts


def _numpy_version() -> str:
    """'numpy VERSION', from its installed metadata when there is one: a compile that needs
    no NumPy does not import it for its version (the same text either way)."""
    found = _installed("numpy", "numpy")
    if found is None:
        import numpy

        found = f"numpy {numpy.__version__}"
    return found


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
    pipeline = _pipeline(options)
    parts = [f"hloc compile cache {CACHE_FORMAT}", f"hloc {__version__}", source_fingerprint(),
             *_toolchain(options.target), json.dumps(options.manifest_flags()),
             _target_description(options)]
    h = hashlib.sha256()
    for part in [*(p.encode() for p in parts), hashlib.sha256(pipeline).digest(),
                 *_canonical_module(loaded)]:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


# /proc/cpuinfo fields that identify a CPU model and what it supports (x86, Arm, RISC-V,
# POWER); the per-core and changing ones (MHz, ids, bogomips) are left out.
_CPUINFO_FIELDS = frozenset({
    "vendor_id", "cpu family", "model", "model name", "stepping", "flags", "CPU implementer",
    "CPU architecture", "CPU variant", "CPU part", "CPU revision", "Features", "isa", "uarch",
    "mmu", "cpu", "revision",
})


def _host_stamp() -> str | None:
    """This machine's CPU as /proc/cpuinfo's first processor describes it (None elsewhere):
    what LLVM's host CPU name and features are a function of."""
    fields: list[str] = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break
                    continue
                if line.split(":", 1)[0].strip() in _CPUINFO_FIELDS:
                    fields.append(" ".join(line.split()))
    except OSError:
        return None
    return f"{os.uname().machine}\n" + "\n".join(fields) if fields else None


def _package_dir(dotted: str) -> str | None:
    """Where `import dotted` would load the package from, found without importing it."""
    from importlib.machinery import PathFinder

    search, name = None, ""
    for part in dotted.split("."):
        name = f"{name}.{part}" if name else part
        spec = PathFinder.find_spec(name, search)
        if spec is None or not spec.submodule_search_locations:
            return None
        search = list(spec.submodule_search_locations)
    return next((d for d in search or () if os.path.isdir(d)), None)


def _installed(dist: str, package: str) -> str | None:
    """'dist version' from the .dist-info beside `package` (None when there is none there)."""
    directory = _package_dir(package)
    if directory is None:
        return None
    site = directory
    for _ in range(package.count(".") + 1):
        site = os.path.dirname(site)
    prefix = dist.replace("-", "_") + "-"
    try:
        names = os.listdir(site)
    except OSError:
        return None
    found = sorted(n for n in names if n.startswith(prefix) and n.endswith(".dist-info"))
    return f"{dist} {found[0][len(prefix):-len('.dist-info')]}" if len(found) == 1 else None


def _llvm_library() -> str | None:
    """The identity (name, size, mtime) of llvmlite's LLVM library, which llvmlite's version
    alone does not pin (builds against other LLVM releases)."""
    directory = _package_dir("llvmlite")
    if directory is None:
        return None
    binding = os.path.join(directory, "binding")
    try:
        libs = sorted(n for n in os.listdir(binding) if n.startswith(("libllvmlite", "llvmlite.")))
        stats = [(n, os.stat(os.path.join(binding, n))) for n in libs]
    except OSError:
        return None
    return " ".join(f"{n} {st.st_size} {st.st_mtime_ns}" for n, st in stats) or None


def _toolchain_stamp(target: str) -> list[str] | None:
    """What `_toolchain` reports, read from the installed files without importing NumPy,
    protobuf or llvmlite (None when an install is not laid out so that it can be read)."""
    parts = [f"python {sys.version}", _installed("numpy", "numpy"),
             _installed("protobuf", "google.protobuf")]
    if target != "interpreter":
        parts += [_installed("llvmlite", "llvmlite"), _llvm_library()]
    return None if None in parts else [p for p in parts if p is not None]


def file_key(data: bytes, options) -> str | None:
    """The compile cache's key of this file's bytes, for finding a module compiled before
    without loading it (None where it cannot be made cheaply: CUDA targets, hosts without
    /proc/cpuinfo, unusual installs). It stands for `compile_key`, so it covers everything
    that key is a function of: the file (the canonical module is a function of its bytes and
    of hloc's sources), the flags and pipeline file, the host CPU (for the resolved target),
    hloc and the toolchain."""
    if options.target not in ("cpu", "interpreter"):
        return None
    host = _host_stamp() if options.target == "cpu" else "interpreter"
    toolchain = _toolchain_stamp(options.target)
    if host is None or toolchain is None:
        return None
    parts = [f"hloc file key {CACHE_FORMAT}", f"hloc {__version__}", source_fingerprint(),
             *toolchain, json.dumps(options.manifest_flags()), host]
    h = hashlib.sha256()
    for part in [*(p.encode() for p in parts), hashlib.sha256(_pipeline(options)).digest(),
                 data]:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _pipeline(options) -> bytes:
    """The contents of the --pipeline file (empty without one)."""
    from .compiler import read_file

    return read_file(options.pipeline_file, "pipeline") if options.pipeline_file else b""


def compile_cached(path: str, options, progress=None) -> tuple[dict, dict[str, bytes]]:
    """(manifest, members) of compiling `path`: from the cache when the key is there, else
    compiled and stored. The caller decides whether the cache may be used (see the CLI).

    A file compiled before is found by its bytes (`file_key`) without loading it; any other
    file is loaded and found by the canonical key, and a compile (or a hit) records its file
    key for the next time."""
    from .compiler import read_file

    data = read_file(path, "model")
    fast = file_key(data, options)
    known = compile_cache.lookup_alias(fast) if fast else None
    if known is not None:
        key, form = known
        entry = compile_cache.lookup(key)
        if entry is not None:
            log.debug("compile cache hit %s (file key %s)", key, fast)
            return _with_input(entry, data, form)
    return _compile_or_hit(path, data, options, fast, known, progress)


def _compile_or_hit(path: str, data: bytes, options, fast: str | None,
                    known: tuple[str, str] | None, progress) -> tuple[dict, dict[str, bytes]]:
    """The cache by canonical key (the file is loaded for it), else a compile that is stored.
    `known` is the (key, form) the file key led to and whose entry was not there."""
    from .compiler import compile_model
    from .frontend import load_bytes

    loaded = load_bytes(data, path)
    key = compile_key(loaded, options)
    entry = compile_cache.lookup(key) if known is None or known[0] != key else None
    if entry is not None:
        log.debug("compile cache hit %s", key)
        entry = _with_input(entry, data, loaded.form)
    else:
        result = compile_model(path, options, data=data, loaded=loaded, key=key,
                               progress=progress)
        entry = result.manifest, {name: _as_bytes(b) for name, b in result.members.items()}
        compile_cache.store(key, *entry)
    if fast:
        compile_cache.store_alias(fast, key, loaded.form)
    return entry


def _with_input(entry: tuple[dict, dict[str, bytes]], data: bytes,
                form: str) -> tuple[dict, dict[str, bytes]]:
    """A cached bundle with this file's digest and form. The module name is the compiled
    module's (a function of the key); the file's own digest and form are this file's."""
    from .compiler import input_section

    manifest, members = entry
    manifest["input"].update(input_section(data, form, manifest["input"]["module_name"]))
    return manifest, members


def _as_bytes(blob) -> bytes:
    """A member as bytes (members may also be iterables of chunks)."""
    if isinstance(blob, bytes | bytearray | memoryview):
        return bytes(blob)
    return b"".join(blob)
