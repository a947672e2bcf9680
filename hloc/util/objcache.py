"""An on-disk cache of compiled object code for code hloc generates at run time.

The runtime's own kernels (the AVX-512 GEMM) are the same for every bundle but cost ~0.7 s of
LLVM time per process to compile. Their object code is cached, keyed by everything that
determines it: the IR text, the target (triple, CPU, features), the optimization level, and
the LLVM and hloc versions.

Cached objects are native code that every later run executes, so the cache is guarded
(issue 17): each entry starts with an HMAC-SHA256 of its name and contents under a per-user
key (`<cache>/mac.key`, 32 random bytes, mode 0600), so a damaged or planted ("poisoned")
entry is recompiled, never loaded; the directory is created 0700, and a directory (or key)
owned by another user, writable by group or others, or reached through a symlink, is not
used at all (logged; objects are then compiled in memory).

Location: $HLOC_CACHE_DIR, else $XDG_CACHE_HOME/hloc, else ~/.cache/hloc.
HLOC_CACHE_DIR=off disables it. A cache that cannot be written is skipped silently (logged).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from collections.abc import Callable

from ..util.log import get_logger
from .fs import atomic_write

log = get_logger("hloc.cache")

_DIGEST = 32


def cache_dir() -> str | None:
    """The cache directory, or None when caching is off."""
    explicit = os.environ.get("HLOC_CACHE_DIR")
    if explicit is not None:
        return None if explicit.strip().lower() in ("", "off", "0", "none") else explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hloc")


def cache_key(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


_KEY_NAME = "mac.key"


def _private_dir(directory: str) -> bool:
    """Create the cache directory 0700 if missing; True if it is ours and private."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.lstat(directory)
    except OSError as e:
        log.info("object cache %s unusable: %s", directory, e)
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        log.warning("object cache %s is not a private directory of this user (owner, mode "
                    "or symlink); not using it", directory)
        return False
    return True


def private_cache_dir() -> str | None:
    """The cache directory if caching is on and it is this user's private directory."""
    directory = cache_dir()
    return directory if directory is not None and _private_dir(directory) else None


def entry_mac(directory: str, name: str, body: bytes) -> bytes | None:
    """The per-user MAC of a cache entry named `name` (None if the key is unusable)."""
    key = _mac_key(directory)
    return None if key is None else _mac(key, name, body)


def _mac_key(directory: str) -> bytes | None:
    """The per-user MAC key (created on first use), or None if it is not private."""
    path = os.path.join(directory, _KEY_NAME)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
    except FileExistsError:
        pass
    except OSError as e:
        log.info("cannot create the object cache key %s: %s", path, e)
        return None
    try:
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            key = f.read(64)
    except OSError as e:
        log.info("cannot read the object cache key %s: %s", path, e)
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or len(key) != 32:
        log.warning("object cache key %s is not a private 32-byte file; not using the cache",
                    path)
        return None
    return key


def _mac(key: bytes, name: str, body: bytes) -> bytes:
    return hmac.new(key, name.encode() + b"\0" + body, hashlib.sha256).digest()


def _read(path: str, key: bytes) -> bytes | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    body = data[_DIGEST:]
    tag = _mac(key, os.path.basename(path), body)
    if len(data) <= _DIGEST or not hmac.compare_digest(tag, data[:_DIGEST]):
        log.warning("object cache entry %s is damaged or was not written by this user's "
                    "hloc; recompiling", path)
        return None
    return body


def cached_object(key: str, compile_object: Callable[[], bytes], kind: str = "obj") -> bytes:
    """The object code for `key`: from the cache, else `compile_object()` (then stored)."""
    directory = cache_dir()
    if directory is None or not _private_dir(directory):
        return compile_object()
    mac_key = _mac_key(directory)
    if mac_key is None:
        return compile_object()
    name = f"{kind}-{key}.o"
    path = os.path.join(directory, name)
    data = _read(path, mac_key)
    if data is not None:
        return data
    data = compile_object()
    try:
        atomic_write(path, _mac(mac_key, name, data) + data)
    except OSError as e:
        log.info("cannot write the object cache %s: %s", directory, e)
    return data
