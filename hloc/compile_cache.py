"""The compile cache's storage: whole compiled bundles, content-addressed, under HLOC_CACHE_DIR.

`lookup(key)` returns the (manifest, members) a compile with that key produced, or None;
`store(key, manifest, members)` records them. Keys come from `hloc.cached_compile.compile_key`
(a sha256 of everything that determines a bundle's bytes); this module only stores bytes.

Location: `<cache_dir()>/bundles/<key>.entry`, where `cache_dir()` is the object cache's
(hloc/util/objcache.py: $HLOC_CACHE_DIR, else $XDG_CACHE_HOME/hloc, else ~/.cache/hloc;
HLOC_CACHE_DIR=off disables both caches). The directory must be this user's and private (the
object cache's `private_cache_dir()`: created 0700, refused if another user owns it or others
can write it).

Beside the entries, `<file key>.alias` (`lookup_alias`/`store_alias`) maps the key of a model
file's bytes (`hloc.cached_compile.file_key`) to the key its module compiles under and the
file's input form, so that a file compiled before is found without loading it. An alias is
sealed and stored like an entry (a manifest of {"key", "form"} and no members).

Entry layout::

    MAGIC (8 bytes) | seal (32 bytes) | body
    body = u32 length of a JSON header | header | member bytes, in header order
    header = {"manifest": ..., "members": [[name, size], ...]}

The seal is the per-user HMAC-SHA256 (the object cache's 0600 key) over the entry's file name
and body: an entry holds native code, so a truncated, damaged, moved or foreign entry is
ignored (logged) and the bundle is recompiled and stored again.

Writes are atomic (temp file + rename in the same directory): two compiles storing the same
key at once both write complete entries with the same content, and the last rename wins.
Errors writing the cache are logged and otherwise ignored: the cache never fails a compile.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
from collections.abc import Callable

from .util.fs import atomic_write
from .util.log import get_logger
from .util.objcache import entry_mac, private_cache_dir

log = get_logger("hloc.compile_cache")

MAGIC = b"HLOCCC1\n"
_SEAL_SIZE = 32
_LEN = struct.Struct("<I")


def _entry_dir() -> str | None:
    """The directory holding bundle entries, or None when caching is off or not private."""
    base = private_cache_dir()
    return None if base is None else os.path.join(base, "bundles")


def entry_path(key: str) -> str | None:
    """Where the entry for `key` lives (None when caching is off)."""
    directory = _entry_dir()
    return None if directory is None else os.path.join(directory, f"{key}.entry")


# A seal maps an entry's body to its tag (None: no tag can be made, so nothing is stored).
Seal = Callable[[bytes], "bytes | None"]


def digest_seal(body: bytes) -> bytes:
    """An unkeyed integrity tag: catches damage, not tampering (tests and tools)."""
    return hashlib.sha256(body).digest()


def _mac_seal(path: str) -> Seal:
    """The per-user MAC over an entry's body, bound to its file name: a bundle entry holds
    native code, so an entry this user's hloc did not write (or one moved to another key's
    name) must never load."""
    directory, name = os.path.split(path)
    return lambda body: entry_mac(os.path.dirname(directory), name, body)


def _unseal(blob: bytes, seal: Seal) -> bytes | None:
    """The body of a stored entry if its magic and seal check out, else None."""
    head = len(MAGIC) + _SEAL_SIZE
    if len(blob) < head + _LEN.size or not blob.startswith(MAGIC):
        return None
    body = blob[head:]
    tag = seal(body)
    return body if tag is not None and hmac.compare_digest(blob[len(MAGIC):head], tag) else None


def encode_entry(manifest: dict, members: dict[str, bytes],
                 seal: Seal = digest_seal) -> bytes | None:
    """The stored bytes for one bundle's manifest and members (None if `seal` has no tag)."""
    names = sorted(members)
    header = json.dumps({"manifest": manifest, "members": [[n, len(members[n])] for n in names]},
                        sort_keys=True, separators=(",", ":")).encode()
    body = b"".join([_LEN.pack(len(header)), header, *(bytes(members[n]) for n in names)])
    tag = seal(body)
    return None if tag is None else MAGIC + tag + body


def decode_entry(blob: bytes, seal: Seal = digest_seal) -> tuple[dict, dict[str, bytes]] | None:
    """(manifest, members) from stored bytes, or None if they are damaged or not an entry."""
    body = _unseal(blob, seal)
    if body is None:
        return None
    (size,) = _LEN.unpack_from(body)
    try:
        header = json.loads(body[_LEN.size:_LEN.size + size])
        offset = _LEN.size + size
        members = {}
        for name, length in header["members"]:
            members[name] = body[offset:offset + length]
            offset += length
        manifest = header["manifest"]
    except (ValueError, KeyError, TypeError):
        return None
    return (manifest, members) if offset == len(body) else None


def lookup(key: str) -> tuple[dict, dict[str, bytes]] | None:
    """The cached (manifest, members) for `key`, or None (a miss, or caching is off)."""
    path = entry_path(key)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    entry = decode_entry(blob, _mac_seal(path))
    if entry is None:
        log.warning("compile cache entry %s is damaged or was not written by this user's "
                    "hloc; recompiling", path)
    return entry


def write_file(path: str, data: bytes | str) -> None:
    """Write a file in the cache atomically, best effort (failures are only logged)."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        atomic_write(path, data)
    except OSError as e:
        log.debug("cannot write the compile cache file %s: %s", path, e)


def _alias_path(file_key: str) -> str | None:
    directory = _entry_dir()
    return None if directory is None else os.path.join(directory, f"{file_key}.alias")


def lookup_alias(file_key: str) -> tuple[str, str] | None:
    """(key, input form) recorded for a model file's key, or None."""
    path = _alias_path(file_key)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            entry = decode_entry(f.read(), _mac_seal(path))
    except OSError:
        return None
    record = entry[0] if entry is not None else {}
    key, form = record.get("key"), record.get("form")
    return (key, form) if isinstance(key, str) and isinstance(form, str) else None


def store_alias(file_key: str, key: str, form: str) -> None:
    """Record that the model file with `file_key` compiles under `key` and has `form`."""
    path = _alias_path(file_key)
    if path is None:
        return
    blob = encode_entry({"key": key, "form": form}, {}, _mac_seal(path))
    if blob is not None:
        write_file(path, blob)


def store(key: str, manifest: dict, members: dict[str, bytes]) -> None:
    """Record a compile's result under `key` (best effort: failures are only logged)."""
    path = entry_path(key)
    if path is None:
        return
    blob = encode_entry(manifest, members, _mac_seal(path))
    if blob is not None:
        write_file(path, blob)
