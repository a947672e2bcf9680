"""The opcode → shape rule registry and `infer_shape`.

A rule is `fn(instr) -> Shape`: it reads the operands' shapes, the attributes, the called
computations and (for ops whose result is chosen by the producer, e.g. broadcast, reshape,
convert, custom-call) the instruction's own declared shape, checks every rule of the op and
returns the result shape. Rules report a broken rule by calling `fail(...)`; `infer_shape`
prefixes the location and the opcode.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import VerifyError
from ...registry import Registry
from ...util.record import dataclass
from ..instruction import Instruction
from ..opcodes import Opcode
from ..shape import Shape

Rule = Callable[[Instruction], Shape]


class RuleBroken(VerifyError):
    """Raised by rules; carries the bare rule text (no location) until `infer_shape` adds it."""


@dataclass(frozen=True)
class Arity:
    """How many operands (or called computations) an opcode takes: min ≤ n ≤ max (None = any)."""

    min: int
    max: int | None
    parity: str = ""  # "even" | "odd" | "" (variadic ops whose operands come in pairs)

    def accepts(self, n: int) -> bool:
        if n < self.min or (self.max is not None and n > self.max):
            return False
        if self.parity == "even":
            return n % 2 == 0
        if self.parity == "odd":
            return n % 2 == 1
        return True

    def describe(self) -> str:
        if self.max == self.min:
            return str(self.min)
        text = f"at least {self.min}" if self.max is None else f"{self.min} to {self.max}"
        return f"an {self.parity} number of operands, {text}" if self.parity else text


@dataclass(frozen=True)
class OpSpec:
    """What the registry knows about one opcode."""

    rule: Rule
    operands: Arity
    called: Arity


# One module per op family; imported on the first lookup (their @register decorators fill SPECS).
SPECS: Registry[Opcode, OpSpec] = Registry("shape rule", modules=tuple(
    f"hloc.ir.shape_inference.{name}" for name in (
        "elementwise", "shape_ops", "reductions", "contractions", "gather_scatter", "control",
        "leaves", "collectives")))


def arity(n: int | tuple[int, int | None], parity: str = "") -> Arity:
    if isinstance(n, tuple):
        return Arity(n[0], n[1], parity)
    return Arity(n, n, parity)


def register(*opcodes: Opcode, operands=1, called=0, parity: str = ""):
    """Decorator: `rule` infers the shape of `opcodes`.

    `operands` / `called` are an exact count or a (min, max-or-None) range.
    """

    def add(rule: Rule) -> Rule:
        for op in opcodes:
            SPECS.add(op, OpSpec(rule, arity(operands, parity), arity(called)))
        return rule

    return add


def spec_of(opcode: Opcode) -> OpSpec | None:
    return SPECS.get(opcode)


def registered_opcodes() -> frozenset[Opcode]:
    return SPECS.keys()


def fail(message: str) -> RuleBroken:
    """Build the error for a broken rule; use as `raise fail(...)`."""
    return RuleBroken(message)


def location(instr: Instruction) -> str:
    comp = instr.parent.name if instr.parent is not None else "<detached>"
    return f"computation {comp}, instruction %{instr.name}"


def located(instr: Instruction, rule: str, path: str | None = None) -> VerifyError:
    """The VerifyError for `rule` broken at `instr`."""
    return VerifyError(f"{location(instr)}: {rule}", path)


def check_counts(instr: Instruction, spec: OpSpec) -> None:
    """Operand and called-computation counts, before a rule indexes into them."""
    n = len(instr.operands)
    if not spec.operands.accepts(n):
        raise fail(f"takes {spec.operands.describe()} operand(s), got {n}")
    c = len(instr.called)
    if not spec.called.accepts(c):
        raise fail(f"calls {spec.called.describe()} computation(s), got {c}")


def infer_shape(instr: Instruction) -> Shape:
    """The shape `instr` must have given its operands, attributes and called computations.

    Raises VerifyError naming the computation, the instruction, the opcode and the broken rule
    (an opcode without a rule is reported the same way).
    """
    spec = SPECS.get(instr.opcode)
    try:
        if spec is None:
            raise fail("no shape rule for this opcode")
        check_counts(instr, spec)
        return spec.rule(instr)
    except RuleBroken as e:
        raise located(instr, f"{instr.opcode.text}: {e.message}") from None
