"""The pass base class and the name → pass registry."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..ir import Module
from ..registry import Registry


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


# One module per pass, imported on the first lookup (their @register_pass decorators fill PASSES).
PASS_MODULES = tuple(f"hloc.passes.{name}" for name in (
    "algebraic_simplifier", "bitcast_reshapes", "call_inliner", "conditional_simplifier",
    "constant_folding", "copy_insertion", "cse", "dce", "dot_canonicalizer", "expand_batch_norm",
    "expand_comparison", "expand_logistic", "expand_rng_bit_generator", "float_normalization",
    "fusion", "fusion_multi_output", "layout_assignment", "tuple_simplifier",
    "while_loop_simplifier"))
PASSES: Registry[str, type[Pass]] = Registry("pass", modules=PASS_MODULES)
# Short spec names: alias -> pass name.
ALIASES: Registry[str, str] = Registry("pass alias", modules=PASS_MODULES)


def register_pass(cls: type[Pass] | None = None, *, aliases: tuple[str, ...] = ()):
    """Class decorator: make a pass available by its `name` (and short aliases) in specs."""

    def add(c: type[Pass]) -> type[Pass]:
        if not c.name:
            raise RuntimeError(f"pass {c.__name__} has no name")
        PASSES.add(c.name, c)
        for a in aliases:
            ALIASES.add(a, c.name)
        return c

    return add(cls) if cls is not None else add


def lookup_pass(name: str) -> type[Pass] | None:
    return PASSES.get(ALIASES.get(name, name))


def all_passes() -> dict[str, type[Pass]]:
    return dict(sorted(PASSES.items()))


def aliases_of(name: str) -> list[str]:
    return sorted(a for a, n in ALIASES.items() if n == name)
