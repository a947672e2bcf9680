"""The pass base class and the name → pass registry."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..ir import Module


class Pass:
    """An HLO → HLO transformation.

    Subclasses are dataclasses whose fields are the pass's options (typed, with defaults), set
    `name` to the spec name, document what they assume and guarantee in the class docstring, and
    implement `run(module) -> bool` returning whether anything changed.
    """

    name: ClassVar[str] = ""

    def run(self, module: Module) -> bool:
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        """The first line of the docstring."""
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else []

    def spec(self) -> str:
        """This pass instance as a spec string, options that differ from defaults included."""
        opts = []
        for f in self.options():
            value = getattr(self, f.name)
            if value != f.default:
                v = str(value).lower() if isinstance(value, bool) else value
                opts.append(f"{f.name.replace('_', '-')}={v}")
        return self.name + ("{" + ",".join(opts) + "}" if opts else "")


_REGISTRY: dict[str, type[Pass]] = {}
_ALIASES: dict[str, str] = {}


def register_pass(cls: type[Pass] | None = None, *, aliases: tuple[str, ...] = ()):
    """Class decorator: make a pass available by its `name` (and short aliases) in specs."""

    def add(c: type[Pass]) -> type[Pass]:
        if not c.name or c.name in _REGISTRY:
            raise RuntimeError(f"pass {c.__name__} has a missing or duplicate name {c.name!r}")
        _REGISTRY[c.name] = c
        for a in aliases:
            _ALIASES[a] = c.name
        return c

    return add(cls) if cls is not None else add


def lookup_pass(name: str) -> type[Pass] | None:
    return _REGISTRY.get(_ALIASES.get(name, name))


def all_passes() -> dict[str, type[Pass]]:
    return dict(sorted(_REGISTRY.items()))


def aliases_of(name: str) -> list[str]:
    return sorted(a for a, n in _ALIASES.items() if n == name)
