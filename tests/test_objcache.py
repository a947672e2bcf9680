"""The on-disk object cache (hloc/util/objcache.py): hits, damage, disabling, unwritable dirs."""

from __future__ import annotations

import pytest

from hloc.util import objcache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HLOC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _counting(data: bytes):
    calls = []

    def compile_object() -> bytes:
        calls.append(1)
        return data
    return compile_object, calls


def test_second_lookup_is_a_hit(cache):
    fn, calls = _counting(b"\x7fELF object bytes")
    key = objcache.cache_key("ir text", "x86_64", "znver4")
    assert objcache.cached_object(key, fn) == b"\x7fELF object bytes"
    assert objcache.cached_object(key, fn) == b"\x7fELF object bytes"
    assert len(calls) == 1
    assert len(list(cache.glob("*.o"))) == 1


def test_keys_differ_by_every_part():
    keys = {objcache.cache_key("a", "b"), objcache.cache_key("a", "c"),
            objcache.cache_key("ab", ""), objcache.cache_key("a", "b", "")}
    assert len(keys) == 4


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_damaged_entry_is_recompiled(cache, damage):
    fn, calls = _counting(b"object code " * 10)
    key = objcache.cache_key("damaged")
    objcache.cached_object(key, fn)
    (entry,) = cache.glob("*.o")
    data = entry.read_bytes()
    entry.write_bytes({"truncate": data[:-5], "empty": b"",
                       "flip": data[:40] + bytes([data[40] ^ 1]) + data[41:]}[damage])
    assert objcache.cached_object(key, fn) == b"object code " * 10
    assert len(calls) == 2
    assert objcache.cached_object(key, fn) == b"object code " * 10  # rewritten: a hit again
    assert len(calls) == 2


def test_off_disables_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HLOC_CACHE_DIR", "off")
    fn, calls = _counting(b"x")
    objcache.cached_object("k", fn)
    objcache.cached_object("k", fn)
    assert len(calls) == 2
    assert objcache.cache_dir() is None


def test_unwritable_cache_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"not a directory")
    monkeypatch.setenv("HLOC_CACHE_DIR", str(blocker / "cache"))
    fn, calls = _counting(b"y")
    assert objcache.cached_object("k", fn) == b"y"
    assert objcache.cached_object("k", fn) == b"y"
    assert len(calls) == 2


def test_default_location_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("HLOC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert objcache.cache_dir() == str(tmp_path / "hloc")
