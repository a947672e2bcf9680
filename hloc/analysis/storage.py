"""Where a value's storage comes from, and dependency order queries within a computation.

`storage_root(value)` follows the links alias analysis will add — a while result or while
parameter back to the while's init, an in-place output back to its updated operand — to the
value that first creates the storage. Copy insertion decides from it whether two positions
would end up sharing storage they must not share.
"""

from __future__ import annotations

from ..ir import Computation, Instruction, Opcode
from .call_graph import CallGraph, nested_sequences, while_body
from .dataflow import Dataflow, HloValue, subtree
from .sharing import in_place_pairs


def while_init_leaf(df: Dataflow, while_instr: Instruction, index) -> HloValue:
    return subtree(df.tree(while_instr.operands[0]), index)


def is_pass_through(df: Dataflow, while_instr: Instruction, index) -> bool:
    """Whether the body hands slot `index` of its parameter back unchanged."""
    body = while_body(while_instr)
    return subtree(df.tree(body.root), index) is subtree(df.tree(body.parameter(0)), index)


def while_of(graph: CallGraph, value: HloValue) -> Instruction | None:
    """The while whose result, condition parameter or body parameter `value` is (else None)."""
    instr = value.instruction
    if instr.opcode == Opcode.WHILE:
        return instr
    if instr.opcode == Opcode.PARAMETER and instr.parent in graph.call_site:
        site = graph.call_site[instr.parent]
        return site if site.opcode == Opcode.WHILE else None
    return None


def storage_root(df: Dataflow, value: HloValue) -> HloValue:
    """The value whose definition creates the storage `value` will live in."""
    graph = df.call_graph
    while True:
        loop = while_of(graph, value)
        if loop is not None:
            value = while_init_leaf(df, loop, value.index)
            continue
        instr = value.instruction
        for out_index, k, op_index in in_place_pairs(instr):
            if out_index == value.index:
                operand = subtree(df.tree(instr.operands[k]), op_index)
                if isinstance(operand, HloValue):
                    value = operand
                    break
        else:
            return value


def is_read_only_storage(df: Dataflow, value: HloValue) -> bool:
    """Whether `value` sits in a constant's or entry parameter's storage that nothing ever
    writes: every while on the way passes the slot through and no in-place op updates it."""
    graph = df.call_graph
    while True:
        loop = while_of(graph, value)
        if loop is None:
            break
        if not is_pass_through(df, loop, value.index):
            return False
        value = while_init_leaf(df, loop, value.index)
    if any(out == value.index for out, _, _ in in_place_pairs(value.instruction)):
        return False
    return is_read_only(value)


def is_read_only(value: HloValue) -> bool:
    """Constants and entry parameters: storage nothing may write."""
    instr = value.instruction
    if instr.opcode == Opcode.CONSTANT:
        return True
    comp = instr.parent
    return (instr.opcode == Opcode.PARAMETER and comp is not None and comp.parent is not None
            and comp.parent.entry is comp)


def closure(comp: Computation) -> frozenset[Computation]:
    """`comp` and every sequential computation nested in it."""
    out, stack = {comp}, [comp]
    while stack:
        for instr in stack.pop().instructions:
            for callee in nested_sequences(instr):
                if callee not in out:
                    out.add(callee)
                    stack.append(callee)
    return frozenset(out)


class DependencyOrder:
    """Reachability over operands and control edges of one computation, kept valid while
    control edges are added. Ranks come from a post order, so `reaches(a, b)` is O(1) when
    b ranks before a and a bounded search otherwise."""

    def __init__(self, comp: Computation):
        self.comp = comp
        self._rank: dict[Instruction, int] | None = None

    def _ranks(self) -> dict[Instruction, int]:
        if self._rank is None:
            self._rank = {instr: i for i, instr in enumerate(self.comp.post_order())}
        return self._rank

    def reaches(self, a: Instruction, b: Instruction) -> bool:
        """Whether b depends (transitively) on a."""
        if a is b:
            return True
        rank = self._ranks()
        if a not in rank or b not in rank:  # instructions added since the ranks were taken
            self._rank = None
            rank = self._ranks()
        limit = rank[b]
        if rank[a] > limit:
            return False
        return self._search(a, b, limit, rank)

    @staticmethod
    def _search(a, b, limit, rank) -> bool:
        stack, seen = [a], {a}
        while stack:
            instr = stack.pop()
            for nxt in instr.users + instr.control_successors:
                if nxt is b:
                    return True
                if nxt not in seen and rank.get(nxt, -1) < limit:  # new ones: explore
                    seen.add(nxt)
                    stack.append(nxt)
        return False

    def add_edge(self, before: Instruction, after: Instruction) -> bool:
        """Order `before` ahead of `after` with a control edge unless something already does;
        returns whether an edge was added."""
        if after in before.control_successors or self.reaches(before, after):
            return False
        before.add_control_dependency(after)
        rank = self._ranks()
        if before not in rank or after not in rank or rank[before] > rank[after]:
            self._rank = None  # the post order no longer respects the new edge
        return True
