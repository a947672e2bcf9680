"""The opcode → lowering registry of the elemental emitter, with per-target overrides.

A lowering is `fn(ctx, instr, operand_generators) -> generator`; a generator maps a
multi-index (a list of i64 `ir.Value`s, one per dimension of the instruction's shape) to the
element's scalar value (or a tuple of values for tuple-shaped instructions).

Complex numbers have a registry of their own: an instruction whose result or operands are
c64/c128 is lowered by its complex lowering (`@emits_complex`), or by the ordinary one when
the opcode only moves elements around (`complex_agnostic`: broadcast, slice, reduce, ...).
Real-typed instructions never look at the complex table, so their code is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode, dtypes
from .context import EmitContext, Generator

Lowering = Callable[[EmitContext, Instruction, list[Generator]], Generator]

_LOWERINGS: dict[tuple[Opcode, str | None], Lowering] = {}
_COMPLEX_LOWERINGS: dict[tuple[Opcode, str | None], Lowering] = {}
# Opcodes whose ordinary lowering is right for complex elements as well.
_COMPLEX_AGNOSTIC: set[Opcode] = set()


def _register(table: dict, opcodes, target: str | None):
    def register(fn: Lowering) -> Lowering:
        for op in opcodes:
            key = (op, target)
            if key in table:
                raise RuntimeError(f"duplicate lowering for {op.value} (target {target})")
            table[key] = fn
        return fn

    return register


def emits(*opcodes: Opcode, target: str | None = None):
    """Register the decorated lowering for `opcodes` (for every target, or only `target`)."""
    return _register(_LOWERINGS, opcodes, target)


def emits_complex(*opcodes: Opcode, target: str | None = None):
    """Register the lowering of `opcodes` for instructions with complex results or operands."""
    return _register(_COMPLEX_LOWERINGS, opcodes, target)


def complex_agnostic(*opcodes: Opcode) -> None:
    """Declare that the ordinary lowerings of `opcodes` handle complex elements too."""
    _COMPLEX_AGNOSTIC.update(opcodes)


def generic_lowering(opcode: Opcode) -> Lowering | None:
    """The target-neutral lowering (what an override falls back to)."""
    return _LOWERINGS.get((opcode, None))


def involves_complex(instr: Instruction) -> bool:
    """Whether the instruction's result or an operand has complex elements."""
    for shape in (instr.shape, *(o.shape for o in instr.operands)):
        for _, leaf in shape.leaves():
            if dtypes.info(leaf.element_type).is_complex:
                return True
    return False


def lookup(instr: Instruction, target_kind: str) -> Lowering:
    _load_complex_lowerings()
    if involves_complex(instr):
        return _complex_lookup(instr, target_kind)
    fn = _LOWERINGS.get((instr.opcode, target_kind)) or _LOWERINGS.get((instr.opcode, None))
    if fn is None:
        raise UnsupportedError(f"the elemental emitter has no lowering for '{instr.opcode.value}' "
                               f"(instruction %{instr.name})")
    return fn


def _complex_lookup(instr: Instruction, target_kind: str) -> Lowering:
    op = instr.opcode
    fn = _COMPLEX_LOWERINGS.get((op, target_kind)) or _COMPLEX_LOWERINGS.get((op, None))
    if fn is None and op in _COMPLEX_AGNOSTIC:
        fn = _LOWERINGS.get((op, target_kind)) or _LOWERINGS.get((op, None))
    if fn is None:
        raise UnsupportedError(f"the elemental emitter has no complex lowering for "
                               f"'{op.value}' (instruction %{instr.name})")
    return fn


_complex_loaded = False


def _load_complex_lowerings() -> None:
    # Imported on first use: the complex modules build on the ordinary lowerings' helpers
    # (and register real-operand `real`/`imag` too).
    global _complex_loaded
    if not _complex_loaded:
        _complex_loaded = True
        from . import complex_arith, complex_math  # noqa: F401


def supported_opcodes(target_kind: str | None = None) -> frozenset[Opcode]:
    _load_complex_lowerings()
    keys = list(_LOWERINGS) + list(_COMPLEX_LOWERINGS)
    return frozenset(op for op, t in keys if t is None or t == target_kind)
