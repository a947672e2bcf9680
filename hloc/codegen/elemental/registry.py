"""The opcode → lowering registry of the elemental emitter, with per-target overrides.

A lowering is `fn(ctx, instr, operand_generators) -> generator`; a generator maps a
multi-index (a list of i64 `ir.Value`s, one per dimension of the instruction's shape) to the
element's scalar value (or a tuple of values for tuple-shaped instructions).

Complex numbers have a registry of their own: an instruction whose result or operands are
c64/c128 is lowered by its complex lowering (`@emits_complex`), or by the ordinary one when
the opcode only moves elements around (`complex_agnostic`: broadcast, slice, reduce, ...).
Real-typed instructions never look at the complex table, so their code is unchanged.

Both tables import the lowering modules on first use, and a target's override modules (the
CPU dot, the CUDA convolution and select-and-scatter) on its first lookup for that target.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode, dtypes
from ...registry import Registry
from .context import EmitContext, Generator

Lowering = Callable[[EmitContext, Instruction, list[Generator]], Generator]

# The lowering modules, imported on the first lookup, and per target the modules of its overrides.
_MODULES = tuple(f"hloc.codegen.elemental.{name}" for name in (
    "arith", "bitops", "compare", "convert", "gather", "indexing", "mathfn", "reduction",
    "complex.arith", "complex.math"))
_TARGET_MODULES = {"cpu": ("hloc.codegen.cpu.dot",),
                   "cuda": ("hloc.codegen.cuda.conv", "hloc.codegen.cuda.selscatter")}
LOWERINGS: Registry[Opcode, Lowering] = Registry(
    "elemental lowering", modules=_MODULES, target_modules=_TARGET_MODULES)
COMPLEX_LOWERINGS: Registry[Opcode, Lowering] = Registry(
    "complex elemental lowering", modules=_MODULES, target_modules=_TARGET_MODULES)
# Opcodes whose ordinary lowering is right for complex elements as well.
_COMPLEX_AGNOSTIC: set[Opcode] = set()
# Decorators: `@emits(Opcode.X, ...)` for every target, `@emits(Opcode.X, target="cpu")` for one;
# `@emits_complex(...)` for instructions with complex results or operands.
emits = LOWERINGS.register
emits_complex = COMPLEX_LOWERINGS.register


def complex_agnostic(*opcodes: Opcode) -> None:
    """Declare that the ordinary lowerings of `opcodes` handle complex elements too."""
    _COMPLEX_AGNOSTIC.update(opcodes)


def generic_lowering(opcode: Opcode) -> Lowering | None:
    """The target-neutral lowering (what an override falls back to)."""
    return LOWERINGS.get(opcode)


def involves_complex(instr: Instruction) -> bool:
    """Whether the instruction's result or an operand has complex elements."""
    for shape in (instr.shape, *(o.shape for o in instr.operands)):
        for _, leaf in shape.leaves():
            if dtypes.info(leaf.element_type).is_complex:
                return True
    return False


def lookup(instr: Instruction, target_kind: str) -> Lowering:
    if involves_complex(instr):
        return _complex_lookup(instr, target_kind)
    fn = LOWERINGS.get(instr.opcode, target=target_kind)
    if fn is None:
        raise UnsupportedError(f"the elemental emitter has no lowering for '{instr.opcode.value}' "
                               f"(instruction %{instr.name})")
    return fn


def _complex_lookup(instr: Instruction, target_kind: str) -> Lowering:
    op = instr.opcode
    fn = COMPLEX_LOWERINGS.get(op, target=target_kind)
    if fn is None and op in _COMPLEX_AGNOSTIC:
        fn = LOWERINGS.get(op, target=target_kind)
    if fn is None:
        raise UnsupportedError(f"the elemental emitter has no complex lowering for "
                               f"'{op.value}' (instruction %{instr.name})")
    return fn


def supported_opcodes(target_kind: str | None = None) -> frozenset[Opcode]:
    return LOWERINGS.keys(target_kind) | COMPLEX_LOWERINGS.keys(target_kind)
