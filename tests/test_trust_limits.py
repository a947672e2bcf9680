"""Issue 17: signatures, the object cache, --timeout / Ctrl-C, safe writes and extraction."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time

import numpy as np
import pytest

from hloc.bundle import read_bundle, write_bundle
from hloc.bundle.signing import load_key
from hloc.errors import InputError
from hloc.runtime import load
from hloc.runtime.limits import RunTimeout, run_limits
from hloc.util import objcache

from .trust_support import ENDLESS_LOOP_HLO, compile_text, members_of, repack

pytestmark = pytest.mark.cpu


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    (d / "ours.key").write_bytes(b"k" * 32)
    (d / "theirs.key").write_bytes(b"t" * 32)
    return d / "ours.key", d / "theirs.key"


@pytest.fixture(scope="module")
def signed(tmp_path_factory, keys):
    tmp = tmp_path_factory.mktemp("signed")
    return compile_text(tmp, ENDLESS_LOOP_HLO, "loop"), tmp


def _sign(src, dst, key):
    return repack(src, dst, sign_key=load_key(str(key), signing=True))


def test_signing_is_deterministic_and_verifies(tmp_path, signed, keys):
    plain, _ = signed
    a, b = _sign(plain, tmp_path / "a.bundle", keys[0]), _sign(plain, tmp_path / "b.bundle", keys[0])
    assert a.read_bytes() == b.read_bytes()
    load(str(a), trusted_keys=[str(keys[0])])
    from hloc.cli.inspect_cmd import inspect_summary

    assert inspect_summary(read_bundle(a))["signature"].startswith("hmac-sha256 key ")
    assert inspect_summary(read_bundle(plain))["signature"] is None


def test_unsigned_and_foreign_signatures_are_refused(tmp_path, signed, keys):
    plain, _ = signed
    with pytest.raises(InputError, match="not signed"):
        load(str(plain), trusted_keys=[str(keys[0])])
    theirs = _sign(plain, tmp_path / "t.bundle", keys[1])
    with pytest.raises(InputError, match="not a trusted key"):
        load(str(theirs), trusted_keys=[str(keys[0])])


def test_signed_bundle_rehashed_by_someone_else_is_refused(tmp_path, signed, keys):
    plain, _ = signed
    good = _sign(plain, tmp_path / "good.bundle", keys[0]).read_bytes()
    # The attacker edits a member, re-hashes everything and copies our signature block.
    forged = bytearray(repack(plain, tmp_path / "f.bundle", replace={"module.hlo": b"edited"},
                              sign_key=load_key(str(keys[1]), signing=True)).read_bytes())
    forged[72:176] = good[72:176]
    forged[40:72] = bytes(32)
    forged[40:72] = hashlib.sha256(bytes(forged)).digest()
    path = tmp_path / "forged.bundle"
    path.write_bytes(bytes(forged))
    with pytest.raises(InputError, match="does not verify"):
        load(str(path), trusted_keys=[str(keys[0])])


def test_poisoned_cache_entry_is_never_loaded(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HLOC_CACHE_DIR", str(cache))
    key = objcache.cache_key("gemm")
    objcache.cached_object(key, lambda: b"good object")
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert (cache / "mac.key").stat().st_mode & 0o777 == 0o600
    (entry,) = cache.glob("*.o")
    evil = b"evil object"
    entry.write_bytes(hashlib.sha256(evil).digest() + evil)  # the old unkeyed format
    assert objcache.cached_object(key, lambda: b"good object") == b"good object"


def test_cache_dir_writable_by_others_is_not_used(tmp_path, monkeypatch):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    monkeypatch.setenv("HLOC_CACHE_DIR", str(cache))
    assert objcache.cached_object("k", lambda: b"fresh") == b"fresh"
    assert list(cache.iterdir()) == []


def test_endless_native_loop_stops_at_timeout(signed):
    plain, _ = signed
    exe = load(str(plain))
    start = time.monotonic()
    with pytest.raises(RunTimeout, match="--timeout"), run_limits(0.2, "the run"):
        exe.run([np.zeros(4, np.float32)])
    assert time.monotonic() - start < 5
    assert RunTimeout.exit_code == 1


def test_ctrl_c_stops_a_native_loop(signed):
    plain, _ = signed
    exe = load(str(plain))
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt), run_limits(None, "the run"):
        exe.run([np.zeros(4, np.float32)])
    timer.join()


def test_extract_refuses_collisions_and_symlinks(tmp_path):
    from hloc.cli.inspect_cmd import extract

    manifest, members = members_of_minimal(tmp_path)
    clash = tmp_path / "clash.bundle"
    write_bundle(clash, manifest=manifest, members={**members, "x": b"1", "x/y": b"2"})
    with pytest.raises(InputError, match="both a file and a directory"):
        extract(read_bundle(clash), str(tmp_path / "out1"))
    nested = tmp_path / "nested.bundle"
    write_bundle(nested, manifest=manifest, members={**members, "code/a.o": b"1"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "out2"
    dest.mkdir()
    (dest / "code").symlink_to(elsewhere)
    with pytest.raises(InputError, match="symlink"):
        extract(read_bundle(nested), str(dest))
    assert list(elsewhere.iterdir()) == []


def members_of_minimal(tmp_path):
    src = compile_text(tmp_path, "HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n",
                       "m", target="interpreter")
    return members_of(src)


def test_output_never_follows_planted_symlink(tmp_path):
    from hloc.runtime.io import write_outputs

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    out = tmp_path / "out.npz"
    for suffix in ("", ".0000.tmp"):
        (tmp_path / f".out.npz.{os.getpid()}{suffix}.tmp").symlink_to(victim)
    write_outputs(out, [np.ones(2, np.float32)])
    assert victim.read_bytes() == b"precious" and out.stat().st_size > 0
    with pytest.raises(InputError, match="is a directory"):
        write_outputs(tmp_path, [np.ones(2, np.float32)])
