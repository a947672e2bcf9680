"""The target-neutral elemental emitter: HLO ops as "multi-index → scalar" generators.

Lowerings register with `@emits(Opcode.X)` (per-target overrides with `target="cpu"`); see
registry.py. Importing this package loads every lowering module.
"""

from __future__ import annotations

from .compose import (
    computation_generators,
    emit_scalar_computation,
    flatten,
    root_generator,
)
from .context import EmitContext
from .registry import Generator, emits, lookup, supported_opcodes


def _load_lowerings() -> None:
    from . import arith, bitops, compare, convert, gather, indexing, mathfn, reduction  # noqa: F401


_load_lowerings()

__all__ = ["EmitContext", "Generator", "computation_generators", "emit_scalar_computation",
           "emits", "flatten", "lookup", "root_generator", "supported_opcodes"]
