"""One registry type for every "key → implementation" table in hloc.

A `Registry` maps keys (opcodes, thunk kinds, pass names, ...) to values (usually functions or
classes) registered with a decorator. It rejects a second registration of a key, names itself in
the error of a failed lookup, lists its keys for coverage tests, and can import the modules that
fill it on first use (`modules=`), so no caller imports a module only for its side effects.
A value may also be registered for one target only (`register(key, target="cpu")`, as JAX's
`register_lowering(prim, rule, platform=...)`): a lookup for that target prefers it over the
target-neutral value.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
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
    Per-target values (`target=`) live beside the target-neutral ones; `get`, `lookup` and
    `keys` given a target see both, the target's first, after importing that target's
    `target_modules` as well.
    """

    def __init__(self, what: str, *, modules: Iterable[str] = (),
                 target_modules: Mapping[str, Iterable[str]] | None = None):
        self.what = what
        self._entries: dict[K, V] = {}
        self._targeted: dict[tuple[K, str], V] = {}
        self._modules = tuple(modules)
        self._loaded = not self._modules
        self._started = False
        self._target_modules = {t: tuple(m) for t, m in (target_modules or {}).items()}
        self._loading = False

    def register(self, *keys: K, target: str | None = None) -> Callable[[V], V]:
        """Decorator: register the decorated value under every key in `keys` (for `target`
        only, if given)."""
        if not keys:
            raise TypeError(f"{self.what}: register() needs at least one key")

        def add(value: V) -> V:
            for key in keys:
                self.add(key, value, target=target)
            return value

        return add

    def add(self, key: K, value: V, *, target: str | None = None) -> None:
        """Register `value` under `key` (for `target` only, if given); once per key and target."""
        if target is not None:
            if (key, target) in self._targeted:
                raise RuntimeError(f"duplicate {self.what} for {_key_text(key)!r} "
                                   f"(target {target})")
            self._targeted[(key, target)] = value
            return
        if key in self._entries:
            raise RuntimeError(f"duplicate {self.what} for {_key_text(key)!r}")
        self._entries[key] = value

    def remove(self, key: K) -> None:
        """Drop the target-neutral entry for `key`, if any (tests that register a temporary
        entry take it out again, so that the tables list real entries only)."""
        self._entries.pop(key, None)

    def load(self, target: str | None = None) -> None:
        """Import the modules that fill this registry, and `target`'s own (idempotent and
        thread-safe: device threads of a multi-device run may look a registry up together)."""
        if self._loaded and target not in self._target_modules:
            return
        with _LOAD_LOCK:
            if self._loading:  # a lookup made while this thread imports the modules
                return
            self._loading = True
            try:
                modules = () if self._started else self._modules
                self._started = True  # a failed import is not retried
                modules += self._target_modules.pop(target, ())
                for name in modules:
                    importlib.import_module(name)
            finally:
                self._loading = False
                self._loaded = True

    def get(self, key: K, default: V | None = None, *, target: str | None = None) -> V | None:
        """The value for `key` (`target`'s own first, if given), or `default`."""
        self.load(target)
        if target is not None and (key, target) in self._targeted:
            return self._targeted[(key, target)]
        return self._entries.get(key, default)

    def lookup(self, key: K, context: str = "", *, target: str | None = None) -> V:
        """The value for `key` (as `get`); an UnsupportedError naming the table and the key if
        absent."""
        value = self.get(key, target=target)
        if value is None:
            where = f" ({context})" if context else ""
            raise UnsupportedError(f"no {self.what} for {_key_text(key)!r}{where}")
        return value

    def __contains__(self, key: object) -> bool:
        self.load()
        return key in self._entries

    def keys(self, target: str | None = None) -> frozenset[K]:
        """Every target-neutral key, plus `target`'s own (for coverage tables and tests)."""
        self.load(target)
        own = (k for k, t in self._targeted if t == target)
        return frozenset(self._entries).union(own)

    def items(self) -> Iterator[tuple[K, V]]:
        """The target-neutral (key, value) pairs in registration order."""
        self.load()
        return iter(list(self._entries.items()))

    def __iter__(self) -> Iterator[K]:
        """The target-neutral keys in registration order."""
        self.load()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self.load()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {len(self._entries)} entries)"
