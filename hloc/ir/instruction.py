"""HLO instructions: an opcode, a shape, operands, called computations and typed attributes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .attrs import NO_ATTRS, Attrs, OpMetadata
from .opcodes import Opcode
from .shape import Shape

if TYPE_CHECKING:
    from .computation import Computation


class UseList:
    """An insertion-ordered set of users with list-like reading (iterate, len, in, index).

    Membership, append and remove are O(1), so instructions with thousands of users (a shared
    constant) don't make passes quadratic.
    """

    __slots__ = ("_items",)

    def __init__(self, items=()):
        self._items: dict[Instruction, None] = dict.fromkeys(items)

    def append(self, user: Instruction) -> None:
        self._items[user] = None

    def remove(self, user: Instruction) -> None:
        del self._items[user]

    def discard(self, user: Instruction) -> None:
        self._items.pop(user, None)

    def clear(self) -> None:
        self._items.clear()

    def __contains__(self, user) -> bool:
        return user in self._items

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __getitem__(self, index):
        return list(self._items)[index]

    def __add__(self, other) -> list:
        return list(self._items) + list(other)

    def __radd__(self, other) -> list:
        return list(other) + list(self._items)

    def __repr__(self) -> str:
        return f"UseList({list(self._items)!r})"


class Instruction:
    """One HLO instruction. Identity matters: use lists hold objects, not names.

    Mutate only through the methods here (or Computation's), which keep use lists right.
    """

    __slots__ = ("id", "name", "opcode", "shape", "operands", "called", "attrs", "metadata",
                 "users", "parent", "control_predecessors", "control_successors")

    def __init__(self, opcode: Opcode, shape: Shape, operands=(), *, name: str = "",
                 called=(), attrs: Attrs = NO_ATTRS, metadata: OpMetadata | None = None,
                 id: int = -1):
        self.id = id
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands: list[Instruction] = list(operands)
        self.called: list[Computation] = list(called)
        self.attrs = attrs
        self.metadata = metadata or OpMetadata()
        self.users = UseList()
        self.parent: Computation | None = None
        self.control_predecessors: list[Instruction] = []
        self.control_successors: list[Instruction] = []

    # ---- use lists ----------------------------------------------------------------------
    def _add_user(self, user: Instruction) -> None:
        if user not in self.users:
            self.users.append(user)

    def _drop_user(self, user: Instruction) -> None:
        if user in self.users and self not in user.operands:
            self.users.remove(user)

    def replace_operand(self, index: int, new: Instruction) -> None:
        old = self.operands[index]
        self.operands[index] = new
        old._drop_user(self)
        new._add_user(self)

    def replace_operand_with(self, old: Instruction, new: Instruction) -> None:
        """Replace every occurrence of `old` among the operands by `new`."""
        for i, op in enumerate(self.operands):
            if op is old:
                self.operands[i] = new
        old._drop_user(self)
        new._add_user(self)

    def replace_all_uses_with(self, new: Instruction) -> None:
        """Point every user (and the computation root) at `new` instead of self."""
        if new is self:
            return
        for user in list(self.users):
            if user is new:
                continue
            user.replace_operand_with(self, new)
        if self.parent is not None and self.parent.root is self:
            self.parent.root = new

    def add_control_dependency(self, successor: Instruction) -> None:
        if successor not in self.control_successors:
            self.control_successors.append(successor)
            successor.control_predecessors.append(self)

    def drop_all_control_deps(self) -> None:
        for p in self.control_predecessors:
            p.control_successors.remove(self)
        for s in self.control_successors:
            s.control_predecessors.remove(self)
        self.control_predecessors.clear()
        self.control_successors.clear()

    # ---- queries ------------------------------------------------------------------------
    def operand(self, i: int) -> Instruction:
        return self.operands[i]

    @property
    def is_root(self) -> bool:
        return self.parent is not None and self.parent.root is self

    @property
    def literal(self):
        return self.attrs.literal

    @property
    def dimensions(self) -> tuple[int, ...]:
        return self.attrs.dimensions or ()

    # XLA's called-computation order: while = [body, condition]; select-and-scatter =
    # [select, scatter]; conditional = branches (pred: [true, false]). Use these accessors.
    @property
    def while_body(self) -> Computation:
        assert self.opcode == Opcode.WHILE
        return self.called[0]

    @property
    def while_condition(self) -> Computation:
        assert self.opcode == Opcode.WHILE
        return self.called[1]

    def fused_computation(self) -> Computation:
        assert self.opcode == Opcode.FUSION
        return self.called[0]

    def with_attrs(self, **changes) -> None:
        self.attrs = self.attrs.with_(**changes)

    def same_as(self, other: Instruction) -> bool:
        """Structural equality of the op itself (not its operands' identities): CSE's test."""
        return (self.opcode == other.opcode and self.shape == other.shape
                and self.attrs == other.attrs and self.called == other.called)

    def __repr__(self) -> str:
        return f"<{self.opcode.value} %{self.name}: {self.shape}>"
