"""Float normalization: arithmetic on narrow floats runs in a wider type, as XLA CPU computes it.

XLA CPU evaluates bf16 arithmetic in f32 and f8 arithmetic in f16, rounding every result back to
the narrow type, and runs f16 dots and convolutions in f32 (other f16 ops stay f16). Rewriting `op(x: bf16)` into
`convert(op(convert(x): f32)): bf16` makes that explicit, so a backend only ever computes in
f16/f32/f64 and the interpreter reproduces XLA's values bit for bit (each op rounds once to the
wide type and once to the narrow one, exactly as XLA does).

Only ops that compute are rewritten. Ops that move or select data (copy, reshape, transpose,
broadcast, slice, concatenate, pad, reverse, gather, select, sort, ...) are exact in any type
and stay narrow; ops with called computations (reduce, reduce-window, scatter, map, sort) stay
narrow too, while the arithmetic inside their computations is normalized like any other, which
keeps XLA's per-step rounding of narrow accumulators.
"""

from __future__ import annotations

from ..errors import InputError
from ..ir import Computation, Instruction, Module, Opcode, PrimitiveType
from ..ir.opcodes import ELEMENTWISE
from ..util.record import dataclass
from .base import Pass, register_pass

Op = Opcode
T = PrimitiveType

# Elementwise ops that only pass values through (or change representation on purpose).
_PASS_THROUGH = frozenset({Op.CONVERT, Op.BITCAST_CONVERT, Op.COPY, Op.SELECT, Op.MAP, Op.RNG,
                           Op.REDUCE_PRECISION, Op.STOCHASTIC_CONVERT})
COMPUTE_OPS = (ELEMENTWISE - _PASS_THROUGH) | {Op.DOT, Op.CONVOLUTION}
_F8 = frozenset({T.F8E5M2, T.F8E4M3FN, T.F8E4M3B11FNUZ, T.F8E5M2FNUZ, T.F8E4M3FNUZ, T.F8E4M3,
                 T.F8E3M4, T.F4E2M1FN})
_WIDE = {"f16": T.F16, "f32": T.F32}
# Types XLA's FloatNormalization itself handles (f16 contractions are upcast elsewhere).
_FOLDABLE = frozenset({T.BF16}) | _F8


_F16_MODES = ("none", "contractions", "all")


def compute_types(bf16: bool, f16: str, f8: bool, f8_compute: str) -> dict[PrimitiveType, PrimitiveType]:
    """narrow type → the type its arithmetic runs in."""
    if f8_compute not in _WIDE:
        raise InputError(f"float-normalization: f8-compute must be one of {', '.join(_WIDE)}, "
                         f"not '{f8_compute}'")
    if f16 not in _F16_MODES:
        raise InputError(f"float-normalization: f16 must be one of {', '.join(_F16_MODES)}, "
                         f"not '{f16}'")
    table: dict[PrimitiveType, PrimitiveType] = {}
    if bf16:
        table[T.BF16] = T.F32
    if f16 != "none":
        table[T.F16] = T.F32
    if f8:
        table.update({t: _WIDE[f8_compute] for t in _F8})
        table[T.F8E8M0FNU] = T.F32  # exponent-only type: its range needs f32
    return table


class _Normalizer:
    """Rewrites the compute ops of one computation."""

    def __init__(self, comp: Computation, table: dict[PrimitiveType, PrimitiveType], fold: bool,
                 f16_everywhere: bool):
        self.comp = comp
        self.table = table
        self.fold = fold
        self.f16_everywhere = f16_everywhere
        self.widened: dict[tuple[int, PrimitiveType], Instruction] = {}

    def target(self, instr: Instruction, ptype: PrimitiveType) -> PrimitiveType | None:
        """The compute type for a narrow `ptype` in `instr`: dots and convolutions always
        accumulate in f32 (XLA CPU upcasts f16 and f8 contractions too)."""
        wide = self.table.get(ptype)
        if wide is not None and instr.opcode in (Op.DOT, Op.CONVOLUTION):
            return T.F32
        if ptype == T.F16 and not self.f16_everywhere:
            return None
        return wide

    def wide(self, value: Instruction, target: PrimitiveType | None) -> Instruction:
        """`value` converted to `target` (shared by every user)."""
        if target is None:
            return value
        key = (id(value), target)
        if key not in self.widened:
            self.widened[key] = self.comp.add(Instruction(
                Op.CONVERT, value.shape.with_type(target), [value]))
        return self.widened[key]

    def needs_rewrite(self, instr: Instruction) -> bool:
        if instr.opcode not in COMPUTE_OPS or not instr.shape.is_array:
            return False
        types = [instr.shape.element_type] + [o.shape.element_type for o in instr.operands]
        return any(self.target(instr, t) is not None for t in types)

    def rewrite(self, instr: Instruction) -> None:
        for k, operand in enumerate(list(instr.operands)):
            instr.replace_operand(k, self.wide(operand, self.target(instr, operand.shape.element_type)))
        narrow = instr.shape
        target = self.target(instr, narrow.element_type)
        if target is None:
            return
        users, was_root = list(instr.users), instr.is_root
        instr.shape = narrow.with_type(target)
        back = self.comp.add(Instruction(Op.CONVERT, narrow, [instr]))
        for user in users:
            if not self.skips_rounding(user, narrow.element_type):
                user.replace_operand_with(instr, back)
            elif user.shape.element_type == target:
                user.replace_all_uses_with(instr)
                self.comp.remove(user)
            # else the convert reads the wide value as it is: an f8 contraction, which XLA
            # runs as an f16 one (in f32 here), read as f16
        if was_root:
            self.comp.root = back
        elif not back.users:
            self.comp.remove(back)

    def skips_rounding(self, user: Instruction, narrow: PrimitiveType) -> bool:
        """XLA CPU quirk, reproduced for equal values: an explicit convert of a normalized bf16
        (f8) result to f32 (f16), the very type XLA's normalization computes it in, reads the
        wide value unrounded; dots and convolutions included (an f8 one, which XLA computes
        as an f16 one in f32, then reads it rounded to f16 only)."""
        return (self.fold and narrow in _FOLDABLE and user.opcode == Op.CONVERT
                and user.shape.element_type == self.table[narrow]
                and not user.control_predecessors and not user.control_successors)

    def run(self) -> bool:
        todo = [i for i in self.comp.post_order() if self.needs_rewrite(i)]
        for instr in todo:
            self.rewrite(instr)
        if todo:
            self.comp.instructions[:] = self.comp.post_order()
        return bool(todo)


@register_pass
@dataclass
class FloatNormalization(Pass):
    """Runs narrow-float arithmetic in a wider type: bf16 in f32, f8 in f16 (`f8-compute`),
    f16 dots and convolutions (`f16=contractions`; `all`: every f16 op) in f32, inserting
    converts around each compute op. XLA CPU keeps f16 elementwise ops native, and they differ
    from f32-then-round in NaN signs (min/max), so by default they stay f16.

    Assumes: a valid module, logistic already expanded (XLA expands it in the narrow type).
    Guarantees: no elementwise compute op, dot or convolution reads or produces an enabled
    narrow type afterwards; each rewritten op rounds its wide result back to the original type
    at once, so values equal XLA CPU's; data movement and the shapes of calls, loops and
    reductions are unchanged. One deliberate difference from the unoptimized module, XLA
    CPU's own (`xla-convert-folding`): a bf16 (f8) op whose result is explicitly converted to
    f32 (f16) feeds that convert's users its unrounded wide value.
    """

    name = "float-normalization"
    bf16: bool = True
    f16: str = "contractions"
    f8: bool = True
    f8_compute: str = "f16"
    xla_convert_folding: bool = True

    def run(self, module: Module) -> bool:
        table = compute_types(self.bf16, self.f16, self.f8, self.f8_compute)
        changed = False
        for comp in module.computations:
            changed |= _Normalizer(comp, table, self.xla_convert_folding,
                                   self.f16 == "all").run()
        return changed

