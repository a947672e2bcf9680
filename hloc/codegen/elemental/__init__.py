"""The target-neutral elemental emitter: HLO ops as "multi-index → scalar" generators.

Lowerings register with `@emits(Opcode.X)` (per-target overrides with `target="cpu"`); see
registry.py. The registry imports the lowering modules on first use.
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

__all__ = ["EmitContext", "Generator", "computation_generators", "emit_scalar_computation",
           "emits", "flatten", "lookup", "root_generator", "supported_opcodes"]
