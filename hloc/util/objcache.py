"""An on-disk cache of compiled object code for code hloc generates at run time.

The runtime's own kernels (the AVX-512 GEMM) are the same for every bundle but cost ~0.7 s of
LLVM time per process to compile. Their object code is cached, keyed by everything that
determines it: the IR text, the target (triple, CPU, features), the optimization level, and
the LLVM and hloc versions. Each entry starts with the sha256 of its contents, so a truncated
or damaged entry is recompiled rather than loaded.

Location: $HLOC_CACHE_DIR, else $XDG_CACHE_HOME/hloc, else ~/.cache/hloc.
HLOC_CACHE_DIR=off disables it. A cache that cannot be written is skipped silently (logged).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable

from .fs import atomic_write

log = logging.getLogger("hloc.cache")

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


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    body = data[_DIGEST:]
    if len(data) <= _DIGEST or hashlib.sha256(body).digest() != data[:_DIGEST]:
        log.info("object cache entry %s is damaged; recompiling", path)
        return None
    return body


def cached_object(key: str, compile_object: Callable[[], bytes], kind: str = "obj") -> bytes:
    """The object code for `key`: from the cache, else `compile_object()` (then stored)."""
    directory = cache_dir()
    if directory is None:
        return compile_object()
    path = os.path.join(directory, f"{kind}-{key}.o")
    data = _read(path)
    if data is not None:
        return data
    data = compile_object()
    try:
        os.makedirs(directory, exist_ok=True)
        atomic_write(path, hashlib.sha256(data).digest() + data)
    except OSError as e:
        log.info("cannot write the object cache %s: %s", directory, e)
    return data
