"""The pass base class and the name → pass registry."""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from ..ir import Module
from ..registry import Registry


class Pass(ABC):
    """An HLO → HLO transformation.

    Subclasses are dataclasses whose fields are the pass's options (typed, with defaults; see
    `option` for a smallest allowed value), set `name` to the spec name, document what they
    assume and guarantee in the class docstring, and implement `run(module) -> bool` returning
    whether anything changed.
    """

    name: ClassVar[str] = ""

    @abstractmethod
    def run(self, module: Module) -> bool:
        """Transform `module` in place; return whether anything changed."""

    def validate(self) -> None:
        """Raise ValueError naming the first option out of range (spec strings and pipeline
        files call this; a pass with checks across options overrides it and calls super)."""
        for f in self.options():
            least = f.metadata.get("minimum")
            value = getattr(self, f.name)
            if least is not None and value < least:
                raise ValueError(f"option '{f.name.replace('_', '-')}' of pass '{self.name}' must "
                                 f"be at least {least}, got {value}")

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


def option(default: Any, *, minimum: int | None = None) -> Any:
    """A pass option field: its default and, for numbers, the smallest value `validate` accepts."""
    return dataclasses.field(default=default, metadata={} if minimum is None else {"minimum": minimum})


# One module per pass, imported on the first lookup (their @register_pass decorators fill PASSES).
PASS_MODULES = tuple(f"hloc.passes.{name}" for name in (
    "simplifier.simplifier", "bf16_dot_operands", "bitcast_reshapes", "call_inliner", "conditional_simplifier",
    "constant_folding", "conv_phases", "copy_insertion", "cse", "dce", "divide_by_broadcast",
    "divide_by_constant", "dot_canonicalizer",
    "expand_batch_norm", "expand_comparison", "expand_logistic", "expand_rng_bit_generator", "float_normalization",
    "fusion.fusion", "fusion.multi_output", "fusion.update", "layout_assignment", "reduce_window_rewriter",
    "topk_rewriter", "tree_reduction_rewriter", "triangular_solve_rewriter", "tuple_simplifier",
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
