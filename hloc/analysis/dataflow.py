"""Dataflow analysis: the HloValues of a module and which value sits at every position.

A value is defined at one (instruction, shape index) array leaf. Instructions that only move
values around define nothing: tuple, get-tuple-element, bitcast, opt-barrier, add-dependency,
domain; a call's result is its callee's root, and branch and callee parameters are the
caller's operands. A while defines its result and the parameters of its condition and body
(they are tied to the init and the body root by alias analysis); a conditional defines its
result (tied to the branch roots). Tuples and tokens own no storage here: they hold no value.

Positions are kept as trees mirroring the shape: an HloValue at an array leaf, a tuple of
trees at a tuple, None at a token. get-tuple-element is then O(1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..ir import Computation, Instruction, Module, Opcode, Shape, ShapeIndex
from ..registry import Registry
from ..util.record import dataclass
from .call_graph import CallGraph, while_body, while_condition

Tree = object  # HloValue | tuple[Tree, ...] | None


@dataclass(frozen=True)
class Use:
    """`instruction` reads the value as leaf `index` of its operand `operand_number`."""

    instruction: Instruction
    operand_number: int
    index: ShapeIndex


class HloValue:
    """One array value, defined at (instruction, index). Identity is the id."""

    __slots__ = ("id", "instruction", "index", "shape", "size", "uses", "root_of")

    def __init__(self, vid: int, instruction: Instruction, index: ShapeIndex, shape: Shape):
        self.id = vid
        self.instruction = instruction
        self.index = index
        self.shape = shape
        self.size = shape.byte_size
        self.uses: list[Use] = []
        # Sequential computations whose root holds this value (it is live at their end).
        self.root_of: list[Computation] = []

    @property
    def opcode(self) -> Opcode:
        return self.instruction.opcode

    def readers(self) -> list[Instruction]:
        """Distinct instructions reading this value, in first-use order."""
        return list(dict.fromkeys(u.instruction for u in self.uses))

    def __repr__(self) -> str:
        idx = "{" + ",".join(map(str, self.index)) + "}"
        return f"<value {self.id} {self.instruction.name}{idx if self.index else ''}>"


def leaves(tree: Tree, prefix: ShapeIndex = ()) -> Iterator[tuple[ShapeIndex, HloValue]]:
    """(index, value) for every array leaf of a position tree, depth-first."""
    if isinstance(tree, HloValue):
        yield prefix, tree
    elif isinstance(tree, tuple):
        for i, sub in enumerate(tree):
            yield from leaves(sub, prefix + (i,))


def subtree(tree: Tree, index: ShapeIndex) -> Tree:
    for i in index:
        tree = tree[i]
    return tree


# Instructions that pass their operand positions through without reading them.
FORWARDING = frozenset({Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT, Opcode.BITCAST,
                        Opcode.OPT_BARRIER, Opcode.ADD_DEPENDENCY, Opcode.DOMAIN})

Handler = Callable[["Dataflow", Instruction], Tree]
# Opcodes whose values are not simply new values at every leaf (Dataflow.define).
HANDLERS: Registry[Opcode, Handler] = Registry("dataflow handler")
_handles = HANDLERS.register


class Dataflow:
    """Values of every sequential computation of a module (thread-local ones own none)."""

    def __init__(self, module: Module, call_graph: CallGraph | None = None):
        self.module = module
        self.call_graph = call_graph or CallGraph(module)
        self.values: list[HloValue] = []
        self._trees: dict[Instruction, Tree] = {}
        self._defined: dict[Instruction, list[HloValue]] = {}
        self._process(module.entry)
        self._collect_uses()

    # ---- queries ------------------------------------------------------------------------
    def tree(self, instr: Instruction) -> Tree:
        return self._trees[instr]

    def value_at(self, instr: Instruction, index: ShapeIndex = ()) -> HloValue:
        value = subtree(self._trees[instr], index)
        if not isinstance(value, HloValue):
            raise KeyError(f"no array value at {instr.name}{list(index)}")
        return value

    def leaves_of(self, instr: Instruction) -> list[tuple[ShapeIndex, HloValue]]:
        return list(leaves(self._trees[instr]))

    def defined_by(self, instr: Instruction) -> list[HloValue]:
        return self._defined.get(instr, [])

    def has(self, instr: Instruction) -> bool:
        return instr in self._trees

    # ---- construction -------------------------------------------------------------------
    def define(self, instr: Instruction, shape: Shape | None = None, prefix: ShapeIndex = ()) -> Tree:
        """New values at every array leaf of `shape` (default: the instruction's shape)."""
        shape = instr.shape if shape is None else shape
        if shape.is_tuple:
            return tuple(self.define(instr, s, prefix + (i,)) for i, s in enumerate(shape.tuple_shapes))
        if not shape.is_array:
            return None
        value = HloValue(len(self.values), instr, prefix, shape)
        self.values.append(value)
        self._defined.setdefault(instr, []).append(value)
        return value

    def _process(self, comp: Computation) -> None:
        for instr in comp.post_order():
            if instr in self._trees:  # a forwarded parameter, set by the caller
                continue
            handler = HANDLERS.get(instr.opcode, Dataflow.define)
            self._trees[instr] = handler(self, instr)

    def _collect_uses(self) -> None:
        for comp in self.call_graph.sequential:
            for instr in comp.instructions:
                if instr.opcode in FORWARDING:
                    continue
                for k, op in enumerate(instr.operands):
                    for index, value in leaves(self._trees[op]):
                        value.uses.append(Use(instr, k, index))
            for _, value in leaves(self._trees[comp.root]):
                value.root_of.append(comp)


@_handles(Opcode.TUPLE)
def _tuple(df: Dataflow, instr: Instruction) -> Tree:
    return tuple(df.tree(op) for op in instr.operands)


@_handles(Opcode.GET_TUPLE_ELEMENT)
def _gte(df: Dataflow, instr: Instruction) -> Tree:
    return df.tree(instr.operands[0])[instr.attrs.tuple_index]


@_handles(Opcode.BITCAST, Opcode.OPT_BARRIER, Opcode.ADD_DEPENDENCY, Opcode.DOMAIN)
def _forward_first(df: Dataflow, instr: Instruction) -> Tree:
    tree = df.tree(instr.operands[0])
    if instr.opcode == Opcode.BITCAST and not isinstance(tree, HloValue):
        return df.define(instr)  # a bitcast of a tuple or token: nothing to forward
    return tree


def _bind_parameters(df: Dataflow, comp: Computation, operands: list[Instruction]) -> None:
    for param in comp.parameters:
        df._trees[param] = df.tree(operands[param.attrs.parameter_number])


@_handles(Opcode.CALL)
def _call(df: Dataflow, instr: Instruction) -> Tree:
    callee = instr.called[0]
    _bind_parameters(df, callee, instr.operands)
    df._process(callee)
    return df.tree(callee.root)


@_handles(Opcode.CONDITIONAL)
def _conditional(df: Dataflow, instr: Instruction) -> Tree:
    for b, branch in enumerate(instr.called):
        _bind_parameters(df, branch, [instr.operands[b + 1]])
        df._process(branch)
    return df.define(instr)


@_handles(Opcode.WHILE)
def _while(df: Dataflow, instr: Instruction) -> Tree:
    for comp in (while_condition(instr), while_body(instr)):
        for param in comp.parameters:
            df._trees[param] = df.define(param)
        df._process(comp)
    return df.define(instr)
