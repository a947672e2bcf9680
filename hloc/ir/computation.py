"""HLO computations: an ordered list of instructions with a root and parameters."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from .attrs import NO_ATTRS, Attrs, OpMetadata
from .instruction import Instruction
from .opcodes import Opcode
from .shape import Shape

if TYPE_CHECKING:
    from .module import Module


class Computation:
    """A computation. `instructions` keeps insertion order; `post_order()` is the dataflow order."""

    __slots__ = ("name", "instructions", "root", "is_fusion", "execution_thread", "id", "parent")

    def __init__(self, name: str, *, is_fusion: bool = False, id: int = -1,
                 execution_thread: str = ""):
        self.name = name
        self.instructions: list[Instruction] = []
        self.root: Instruction | None = None
        self.is_fusion = is_fusion
        self.execution_thread = execution_thread
        self.id = id
        self.parent: Module | None = None

    # ---- building -----------------------------------------------------------------------
    def add(self, instr: Instruction) -> Instruction:
        """Append an instruction (operands must already be in this computation)."""
        instr.parent = self
        if self.parent is not None:
            self.parent.register(instr)
        for op in instr.operands:
            op._add_user(instr)
        self.instructions.append(instr)
        return instr

    def create(self, opcode: Opcode, shape: Shape, operands=(), *, name: str = "", called=(),
               attrs: Attrs = NO_ATTRS, metadata: OpMetadata | None = None) -> Instruction:
        """Create and append a new instruction; the module gives it a unique name and id."""
        instr = Instruction(opcode, shape, operands, name=name or opcode.value, called=called,
                            attrs=attrs, metadata=metadata)
        return self.add(instr)

    def remove(self, instr: Instruction) -> None:
        """Remove an instruction that has no users and is not the root."""
        if instr.users:
            raise ValueError(f"cannot remove {instr.name}: it still has users")
        if instr is self.root:
            raise ValueError(f"cannot remove {instr.name}: it is the root of {self.name}")
        for op in instr.operands:
            op.users.discard(instr)
        instr.drop_all_control_deps()
        self.instructions.remove(instr)
        instr.parent = None

    def replace_instruction(self, old: Instruction, new: Instruction) -> None:
        """Redirect all uses of `old` to `new` (added if needed) and remove `old`."""
        if new.parent is None:
            self.add(new)
        old.replace_all_uses_with(new)
        for pred in list(old.control_predecessors):
            pred.add_control_dependency(new)
        if not old.users and old is not self.root:
            self.remove(old)

    # ---- queries ------------------------------------------------------------------------
    @property
    def parameters(self) -> list[Instruction]:
        params = [i for i in self.instructions if i.opcode == Opcode.PARAMETER]
        return sorted(params, key=lambda p: p.attrs.parameter_number)

    def parameter(self, n: int) -> Instruction:
        for i in self.instructions:
            if i.opcode == Opcode.PARAMETER and i.attrs.parameter_number == n:
                return i
        raise IndexError(f"{self.name} has no parameter {n}")

    @property
    def num_parameters(self) -> int:
        return sum(1 for i in self.instructions if i.opcode == Opcode.PARAMETER)

    @property
    def result_shape(self) -> Shape:
        assert self.root is not None
        return self.root.shape

    def post_order(self) -> list[Instruction]:
        """Operands (and control predecessors) before users; unreachable instructions included."""
        return dfs_post_order(self.instructions, _operands_then_control)

    def called_computations(self) -> list[Computation]:
        seen: dict[int, Computation] = {}
        for instr in self.instructions:
            for c in instr.called:
                seen.setdefault(id(c), c)
        return list(seen.values())

    def get(self, name: str) -> Instruction:
        for i in self.instructions:
            if i.name == name:
                return i
        raise KeyError(f"no instruction {name} in {self.name}")

    def __repr__(self) -> str:
        return f"<computation {self.name}: {len(self.instructions)} instructions>"


_Node = TypeVar("_Node")


def _operands_then_control(instr: Instruction) -> Sequence[Instruction]:
    preds = instr.control_predecessors
    return instr.operands + preds if preds else instr.operands


def dfs_post_order(starts: Iterable[_Node], deps: Callable[[_Node], Sequence[_Node]],
                   visited: set[int] | None = None) -> list[_Node]:
    """Iterative depth-first post order from `starts` (instructions, computations, ...): each
    node after everything `deps(node)` returns, in the order a recursive walk visiting each
    node's deps first to last would list them. Ids in `visited` count as already placed (and
    are not listed). (The passes walk every computation after every change: this runs on
    every instruction many times per compile.)"""
    order: list[_Node] = []
    append = order.append
    seen = set() if visited is None else visited
    mark = seen.add
    for start in starts:
        if id(start) in seen:
            continue
        mark(id(start))
        stack = [(start, iter(deps(start)))]
        push, pop = stack.append, stack.pop
        while stack:
            node, pending = stack[-1]
            for dep in pending:
                if id(dep) not in seen:
                    mark(id(dep))
                    push((dep, iter(deps(dep))))
                    break
            else:
                pop()
                append(node)
    return order


def scalar_binary_root(comp: Computation) -> Instruction | None:
    """The root if `comp` is exactly op(p0, p1) (either order) on scalars of one element type
    (a plain reducer such as add or max), else None."""
    root = comp.root
    if root is None or comp.num_parameters != 2 or len(root.operands) != 2:
        return None
    params = comp.parameters
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    if any(p.shape.dims or p.shape.element_type != root.shape.element_type for p in params):
        return None
    return root
