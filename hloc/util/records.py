"""`dataclass`: the standard library's decorator, with the methods it generates compiled once.

`dataclasses` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` and frozen
`__setattr__`/`__delattr__` as source text and compiles it with `exec` when the class is
defined. For hloc's ~200 record classes that compilation is most of the decorator's cost: about
70 ms of every command's start, more than any one stage of a small compile.

This module's `dataclass` is the standard one (same classes, same methods, same errors), except
that while it runs, `exec` of a source text inside `dataclasses` first looks the text up in a
cache of compiled code objects: `hloc/__pycache__/dataclass-methods.TAG.marshal`, beside the
bytecode Python caches for hloc's modules and written under the same rules (not with
`PYTHONDONTWRITEBYTECODE`, not where the directory cannot be written). An entry is keyed by the
exact text, so it can never be stale; the file is marshal data (the interpreter's bytecode
magic number, then a dict of text to marshalled code), read once per process, each code
unmarshalled only when its class is defined. A missing, unreadable or malformed file or entry
only means compiling as `dataclasses` always does. New entries are written when the process
ends (`flush`, at interpreter exit, which the CLI's exit runs too), merged with what other
processes wrote meanwhile, through an exclusive temporary file renamed into place.
"""

from __future__ import annotations

import builtins
import dataclasses
import marshal
import os
import sys
import threading
from importlib.util import MAGIC_NUMBER
from typing import TYPE_CHECKING

from .sources import PACKAGE_DIR

MAX_ENTRIES = 4096  # past this (many hloc versions' texts), keep only what this process used

_lock = threading.RLock()
_cache: dict[str, bytes] | None = None  # text -> its code, marshalled (loaded when used)
_new: dict[str, bytes] = {}
_used: set[str] = set()
_CODE = type(compile("", "<string>", "exec"))


def cache_path() -> str:
    tag = sys.implementation.cache_tag or "none"
    return os.path.join(PACKAGE_DIR, "__pycache__", f"dataclass-methods.{tag}.marshal")


def _read(path: str) -> dict[str, bytes]:
    try:
        with open(path, "rb") as f:
            magic, data = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if magic != MAGIC_NUMBER or not isinstance(data, dict):  # another bytecode version
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, bytes)}


def _code(source: str):
    """The code of `source` (a method's text): from the cache, else compiled (and kept)."""
    global _cache
    if _cache is None:
        _cache = _read(cache_path())
    _used.add(source)
    blob = _cache.get(source)
    if blob is not None:
        try:
            code = marshal.loads(blob)
        except (EOFError, ValueError, TypeError):
            code = None
        if isinstance(code, _CODE):
            return code
    code = compile(source, "<string>", "exec")
    _new[source] = _cache[source] = marshal.dumps(code)
    return code


def _cached_exec(source, globals=None, locals=None):  # noqa: A002 - exec's own parameters
    return builtins.exec(_code(source) if isinstance(source, str) else source, globals, locals)


def _fast_dataclass(cls=None, /, **options):
    def wrap(cls):
        with _lock:
            vars(dataclasses)["exec"] = _cached_exec  # found before the builtin by dataclasses
            try:
                return dataclasses.dataclass(**options)(cls)
            finally:
                vars(dataclasses).pop("exec", None)

    return wrap if cls is None else wrap(cls)


def flush() -> None:
    """Write the entries this process compiled (merged with the file as it is now)."""
    if not _new or sys.dont_write_bytecode:
        return
    path = cache_path()
    with _lock:
        merged = _read(path)
        merged.update(_new)
        if len(merged) > MAX_ENTRIES:
            merged = {k: v for k, v in merged.items() if k in _used}
        _new.clear()
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(tmp, flags, 0o644)
        except OSError:  # a read-only installation: compile at every start, as without us
            return
        try:
            with os.fdopen(fd, "wb") as f:
                marshal.dump((MAGIC_NUMBER, merged), f)
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


if TYPE_CHECKING:
    from dataclasses import dataclass as dataclass
else:
    dataclass = _fast_dataclass
    import atexit

    atexit.register(flush)
