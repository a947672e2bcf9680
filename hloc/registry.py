"""One registry type for every "key → implementation" table in hloc.

A `Registry` maps keys (opcodes, thunk kinds, pass names, ...) to values (usually functions or
classes) registered with a decorator. It rejects a second registration of a key, names itself in
the error of a failed lookup, lists its keys for coverage tests, and can import the modules that
fill it on first use (`modules=`), so no caller imports a module only for its side effects.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from .errors import UnsupportedError

_LOAD_LOCK = threading.RLock()
K = TypeVar("K")
V = TypeVar("V")


def _key_text(key: object) -> str:
    value = getattr(key, "value", key)
    return str(value)


class Registry(Generic[K, V]):
    """A named key → value table filled by `register(*keys)` decorators.

    `what` names the table in errors ("interpreter implementation", "CPU thunk builder").
    `modules` are imported (once, in order) before the first lookup or listing, so that their
    `register` decorators have run; a module may itself register into several registries.
    """

    def __init__(self, what: str, *, modules: Iterable[str] = ()):
        self.what = what
        self._entries: dict[K, V] = {}
        self._modules = tuple(modules)
        self._loaded = not self._modules
        self._loading = False

    def register(self, *keys: K) -> Callable[[V], V]:
        """Decorator: register the decorated value under every key in `keys`."""
        if not keys:
            raise TypeError(f"{self.what}: register() needs at least one key")

        def add(value: V) -> V:
            for key in keys:
                self.add(key, value)
            return value

        return add

    def add(self, key: K, value: V) -> None:
        """Register `value` under `key`; a key may be registered once."""
        if key in self._entries:
            raise RuntimeError(f"duplicate {self.what} for {_key_text(key)!r}")
        self._entries[key] = value

    def load(self) -> None:
        """Import the modules that fill this registry (idempotent and thread-safe: device
        threads of a multi-device run may look up a registry for the first time together)."""
        if self._loaded:
            return
        with _LOAD_LOCK:
            if self._loaded or self._loading:  # loaded meanwhile, or a lookup while importing
                return
            self._loading = True
            try:
                for name in self._modules:
                    importlib.import_module(name)
            finally:
                self._loading = False
            self._loaded = True

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value for `key`, or `default`."""
        self.load()
        return self._entries.get(key, default)

    def lookup(self, key: K, context: str = "") -> V:
        """The value for `key`; an UnsupportedError naming the table and the key if absent."""
        self.load()
        try:
            return self._entries[key]
        except KeyError:
            where = f" ({context})" if context else ""
            raise UnsupportedError(f"no {self.what} for {_key_text(key)!r}{where}") from None

    def __contains__(self, key: object) -> bool:
        self.load()
        return key in self._entries

    def keys(self) -> frozenset[K]:
        """Every registered key (for coverage tables and tests)."""
        self.load()
        return frozenset(self._entries)

    def items(self) -> Iterator[tuple[K, V]]:
        self.load()
        return iter(list(self._entries.items()))

    def __len__(self) -> int:
        self.load()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {len(self._entries)} entries)"
