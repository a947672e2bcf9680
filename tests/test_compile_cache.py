"""The compile cache (hloc/compile_cache.py, hloc/cached_compile.py): hits are byte-identical,
the key follows module, flags, target and compiler but not the file's path or wrapper form,
damaged entries are recompiled, --no-cache bypasses it, concurrent writers are safe."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from hloc import cached_compile, compile_cache
from hloc.cli.main import cli
from hloc.compiler import CompileOptions
from hloc.frontend import load, make_hlo_proto

from .conftest import SAMPLES

MLP = SAMPLES / "mlp.pb"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("HLOC_CACHE_DIR", str(directory))
    return directory


def hloc(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def entries(cache) -> list:
    return sorted(p for p in (cache / "bundles").glob("*.entry") if not p.name.startswith("sources-"))


def forbid_compiling(monkeypatch):
    """Make any real compile fail, so a passing command proves it was a cache hit."""
    def fail(*args, **kwargs):
        raise AssertionError("compiled although the cache holds the bundle")

    monkeypatch.setattr("hloc.compiler.compile_model", fail)


def key_of(path, **options) -> str:
    return cached_compile.compile_key(load(path), CompileOptions(**options))


def test_hit_is_byte_identical_to_a_fresh_compile(tmp_path, cache, monkeypatch):
    assert hloc("compile", MLP, "-o", tmp_path / "a.bundle").exit_code == 0
    assert len(entries(cache)) == 1
    assert hloc("compile", MLP, "--no-cache", "-o", tmp_path / "fresh.bundle").exit_code == 0
    forbid_compiling(monkeypatch)
    assert hloc("compile", MLP, "-o", tmp_path / "b.bundle").exit_code == 0
    hit = (tmp_path / "b.bundle").read_bytes()
    assert hit == (tmp_path / "a.bundle").read_bytes() == (tmp_path / "fresh.bundle").read_bytes()


def test_hit_from_another_path_and_form_records_that_file(tmp_path, cache, monkeypatch):
    assert hloc("compile", MLP, "-o", tmp_path / "a.bundle").exit_code == 0
    wrapped = tmp_path / "elsewhere" / "model.bin"
    wrapped.parent.mkdir()
    wrapped.write_bytes(make_hlo_proto(load(MLP).module))  # an HloProto around the same module
    assert hloc("compile", wrapped, "--no-cache", "-o", tmp_path / "fresh.bundle").exit_code == 0
    forbid_compiling(monkeypatch)
    assert hloc("compile", wrapped, "-o", tmp_path / "hit.bundle").exit_code == 0
    assert (tmp_path / "hit.bundle").read_bytes() == (tmp_path / "fresh.bundle").read_bytes()
    summary = json.loads(hloc("inspect", "--json", tmp_path / "hit.bundle").output)
    assert summary["input"]["form"] == "HloProto"


def test_key_ignores_path_and_wrapper_form(tmp_path):
    copy = tmp_path / "copy.model"
    shutil.copy(MLP, copy)
    wrapped = tmp_path / "wrapped.pb"
    wrapped.write_bytes(make_hlo_proto(load(MLP).module))
    assert key_of(MLP) == key_of(copy) == key_of(wrapped)


def test_key_follows_module_flags_target_and_compiler(monkeypatch):
    base = key_of(MLP)
    others = {
        "module": key_of(SAMPLES / "cnn.pb"),
        "opt level": key_of(MLP, opt_level=1),
        "disabled pass": key_of(MLP, disabled_passes=("cse",)),
        "cpu": key_of(MLP, cpu="x86-64-v2"),
        "features": key_of(MLP, cpu="x86-64-v3", cpu_features="-fma"),
        "target": key_of(MLP, target="interpreter"),
    }
    monkeypatch.setattr(cached_compile, "__version__", "99.0")
    others["version"] = key_of(MLP)
    monkeypatch.undo()
    monkeypatch.setattr(cached_compile, "source_fingerprint", lambda: "0" * 64)
    others["sources"] = key_of(MLP)
    assert len({base, *others.values()}) == len(others) + 1, others


def aliases(cache) -> list:
    return sorted((cache / "bundles").glob("*.alias"))


def test_file_compiled_before_hits_without_loading_it(tmp_path, cache, monkeypatch):
    assert hloc("compile", MLP, "-o", tmp_path / "a.bundle").exit_code == 0
    assert len(aliases(cache)) == 1
    forbid_compiling(monkeypatch)

    def fail(*args, **kwargs):
        raise AssertionError("loaded the model although its file key is in the cache")

    monkeypatch.setattr("hloc.frontend.load_bytes", fail)
    assert hloc("compile", MLP, "-o", tmp_path / "b.bundle").exit_code == 0
    assert (tmp_path / "b.bundle").read_bytes() == (tmp_path / "a.bundle").read_bytes()


def test_alias_without_its_entry_or_forged_is_not_used(tmp_path, cache):
    assert hloc("compile", MLP, "-o", tmp_path / "a.bundle").exit_code == 0
    [entry], [alias] = entries(cache), aliases(cache)
    entry.unlink()  # the alias now leads nowhere: the file is compiled and stored again
    assert hloc("compile", MLP, "-o", tmp_path / "b.bundle").exit_code == 0
    assert entries(cache) == [entry]
    fast = alias.name.removesuffix(".alias")
    assert compile_cache.lookup_alias(fast) == (entry.name.removesuffix(".entry"), "HloModuleProto")
    # Re-sealed with the unkeyed digest (pointing elsewhere), as another user could do.
    alias.write_bytes(compile_cache.encode_entry({"key": "1" * 64, "form": "text"}, {}))
    assert compile_cache.lookup_alias(fast) is None
    assert hloc("compile", MLP, "-o", tmp_path / "c.bundle").exit_code == 0
    assert (tmp_path / "c.bundle").read_bytes() == (tmp_path / "a.bundle").read_bytes()


def test_file_key_follows_bytes_flags_host_and_toolchain(tmp_path, monkeypatch):
    data = MLP.read_bytes()
    base = cached_compile.file_key(data, CompileOptions())
    assert base is not None and base == cached_compile.file_key(data, CompileOptions())
    others = {
        "bytes": cached_compile.file_key(data + b" ", CompileOptions()),
        "opt level": cached_compile.file_key(data, CompileOptions(opt_level=1)),
        "cpu": cached_compile.file_key(data, CompileOptions(cpu="x86-64-v2")),
        "target": cached_compile.file_key(data, CompileOptions(target="interpreter")),
    }
    pipeline = tmp_path / "p.json"
    pipeline.write_text('{"passes": []}')
    others["pipeline"] = cached_compile.file_key(data, CompileOptions(pipeline_file=str(pipeline)))
    monkeypatch.setattr(cached_compile, "_host_stamp", lambda: "another cpu")
    others["host"] = cached_compile.file_key(data, CompileOptions())
    monkeypatch.setattr(cached_compile, "_llvm_library", lambda: "another llvm")
    others["llvm"] = cached_compile.file_key(data, CompileOptions())
    monkeypatch.setattr(cached_compile, "__version__", "99.0")
    others["version"] = cached_compile.file_key(data, CompileOptions())
    assert len({base, *others.values()}) == len(others) + 1, others
    assert cached_compile.file_key(data, CompileOptions(target="cuda")) is None
    monkeypatch.setattr(cached_compile, "_host_stamp", lambda: None)
    assert cached_compile.file_key(data, CompileOptions()) is None


def test_toolchain_stamp_reads_the_installed_versions():
    import google.protobuf
    import llvmlite
    import numpy

    stamp = cached_compile._toolchain_stamp("cpu")
    assert stamp is not None
    for version in (numpy.__version__, google.protobuf.__version__, llvmlite.__version__):
        assert any(version in part for part in stamp), (version, stamp)


def test_without_a_file_key_hits_by_the_canonical_key(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(cached_compile, "_host_stamp", lambda: None)
    assert hloc("compile", MLP, "-o", tmp_path / "a.bundle").exit_code == 0
    assert not aliases(cache)
    forbid_compiling(monkeypatch)
    assert hloc("compile", MLP, "-o", tmp_path / "b.bundle").exit_code == 0
    assert (tmp_path / "b.bundle").read_bytes() == (tmp_path / "a.bundle").read_bytes()


def test_inspect_shows_the_key(tmp_path, cache):
    assert hloc("compile", MLP, "-o", tmp_path / "a.bundle").exit_code == 0
    summary = json.loads(hloc("inspect", "--json", tmp_path / "a.bundle").output)
    assert summary["cache_key"] == key_of(MLP)
    assert entries(cache)[0].name == f"{summary['cache_key']}.entry"
    assert f"cache key: {summary['cache_key']}" in hloc("inspect", tmp_path / "a.bundle").output


def test_damaged_entry_is_recompiled(tmp_path, cache, caplog):
    assert hloc("compile", MLP, "-o", tmp_path / "a.bundle").exit_code == 0
    [entry] = entries(cache)
    blob = bytearray(entry.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    entry.write_bytes(bytes(blob))
    with caplog.at_level(logging.DEBUG, logger="hloc.compile_cache"):
        assert hloc("compile", MLP, "-o", tmp_path / "b.bundle").exit_code == 0
    assert "damaged or was not written by this user's hloc" in caplog.text
    assert (tmp_path / "b.bundle").read_bytes() == (tmp_path / "a.bundle").read_bytes()
    assert compile_cache.lookup(entry.name.removesuffix(".entry")) is not None  # stored again


def test_forged_or_moved_entries_never_load(tmp_path, cache):
    assert hloc("compile", MLP, "-o", tmp_path / "a.bundle").exit_code == 0
    [entry] = entries(cache)
    key = entry.name.removesuffix(".entry")
    manifest, members = compile_cache.lookup(key)
    # Re-sealed with the unkeyed digest, as someone without this user's MAC key could do.
    entry.write_bytes(compile_cache.encode_entry(manifest, members))
    assert compile_cache.lookup(key) is None
    # A genuine entry copied under another key's name does not load either.
    compile_cache.store(key, manifest, members)
    other = "1" * 64
    (cache / "bundles" / f"{other}.entry").write_bytes(entry.read_bytes())
    assert compile_cache.lookup(key) is not None and compile_cache.lookup(other) is None


@pytest.mark.parametrize("flag", [["--no-cache"], ["--time-passes"], ["--stop-after", "passes"]])
def test_flags_that_need_the_stages_bypass_the_cache(tmp_path, cache, flag):
    assert hloc("compile", MLP, *flag, "-o", tmp_path / "a.bundle").exit_code == 0
    assert not (cache / "bundles").exists() or not entries(cache)


def test_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("HLOC_CACHE_DIR", "off")
    assert compile_cache.entry_path("0" * 64) is None
    assert compile_cache.lookup("0" * 64) is None
    compile_cache.store("0" * 64, {}, {})  # a no-op


def test_entry_round_trip_and_truncation():
    manifest, members = {"a": [1, "x"]}, {"module.pb": b"\x00\x01", "z.txt": b"text" * 100}
    blob = compile_cache.encode_entry(manifest, members)
    assert compile_cache.decode_entry(blob) == (manifest, members)
    for cut in (0, 10, 40, len(blob) - 1):
        assert compile_cache.decode_entry(blob[:cut]) is None


def test_concurrent_writers_leave_a_whole_entry(cache):
    key = "ab" * 32
    members = {f"m{i}": bytes([i]) * 200_000 for i in range(8)}
    seen = []

    def write():
        for _ in range(5):
            compile_cache.store(key, {"k": 1}, members)

    def read():
        for _ in range(20):
            seen.append(compile_cache.lookup(key))

    threads = [threading.Thread(target=write) for _ in range(3)] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(entry is None or entry == ({"k": 1}, members) for entry in seen)
    assert compile_cache.lookup(key) == ({"k": 1}, members)
    assert [p.name for p in (cache / "bundles").iterdir()] == [f"{key}.entry"]  # no temp files left


_IMPORTED = """
import atexit, sys
atexit.register(lambda: print(" ".join(sorted(sys.modules)), flush=True))
sys.argv = ["hloc", *sys.argv[1:]]
from hloc.cli.entry import main
main()
"""


def imported_by(*args, env) -> set[str]:
    """The modules an `hloc` command imports, run in a fresh interpreter as the `hloc`
    command runs it (hloc.cli.entry; conftest sets HLOC_SERVER=off)."""
    out = subprocess.run([sys.executable, "-c", _IMPORTED, *map(str, args)], check=True,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, **env}).stdout
    return set(out.strip().splitlines()[-1].split())


def under(modules: set[str], *prefixes: str) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in prefixes or m.startswith(prefixes))


def test_import_budget(tmp_path):
    """What each command may import: --help nothing heavy; a CPU compile no runtime, no CUDA
    code generator or GPU thunk kinds, no text parser for a proto, no jsonschema, and for a
    module whose constants are small, no NumPy (ir/packing.py), no click for a plain
    command line (cli/compile_cmd.py), and no logging while nothing is logged; a cache hit of a file compiled
    before neither the compiler nor the IR, NumPy, protobuf or llvmlite (it is found by the
    file's bytes)."""
    env = {"HLOC_CACHE_DIR": str(tmp_path / "cache")}
    assert not under(imported_by("compile", "--help", env=env),
                     "numpy", "llvmlite", "google", "jsonschema", "hloc.ir", "hloc.compiler")
    miss = imported_by("compile", MLP, "-o", tmp_path / "a.bundle", env=env)
    assert not under(miss, "jsonschema", "hloc.runtime", "hloc.codegen.cuda", "hloc.ir.text.parser",
                     "hloc.ir.text.literal_parse",
                     "hloc.thunks.gpu", "numpy", "ml_dtypes",  # its constants are all scalars
                     "click", "hloc.cli.main",  # its command line is read without click
                     "logging", "concurrent")  # it logs nothing (util/log.py), plain threads
    hit = imported_by("compile", MLP, "-o", tmp_path / "b.bundle", env=env)
    assert not under(hit, "hloc.passes", "hloc.buffers", "hloc.codegen", "hloc.schedule",
                     "hloc.runtime", "jsonschema", "hloc.ir", "hloc.frontend", "hloc.plan",
                     "numpy", "ml_dtypes", "llvmlite", "google")


# Samples whose compile once imported NumPy for a few scalars: folding integer compares and
# selects (JAX's remainder), a loop's trip count, a divisor's reciprocal (a mean), a reshaped
# index constant, a pad's zero. Python computes those now (passes/constant_folding.py
# fold_in_python, divide_by_constant, rewrite.splat_value, ir/packing.py's default NaN).
@pytest.mark.parametrize("name", ["while_dynamic", "scan_rnn", "fori_loop", "attention", "cnn",
                                  "gather", "sort"])
def test_small_constants_need_no_numpy(name, tmp_path):
    env = {"HLOC_CACHE_DIR": "off"}
    modules = imported_by("compile", SAMPLES / f"{name}.pb", "-o", tmp_path / "s.bundle", env=env)
    assert "hloc.passes" in modules  # it compiled
    assert not under(modules, "numpy", "ml_dtypes")
