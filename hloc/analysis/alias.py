"""Alias analysis: HloBuffers, the sets of values that must share storage.

Values are joined (union-find) for
- a while: init element ~ condition parameter ~ body parameter ~ body root element ~ result;
- a conditional: every branch root element ~ the result element;
- in-place instructions (see sharing.in_place_pairs): output ~ the updated operand;
- the module's input_output_alias: entry root element ~ entry parameter.
Copy insertion is what makes these joins legal (no two values of one buffer live at once,
except where an in-place instruction reads the old value while writing the new one).
"""

from __future__ import annotations

from ..ir import Module, Opcode
from .call_graph import while_body, while_condition
from .dataflow import Dataflow, HloValue, leaves, subtree
from .sharing import in_place_pairs


class HloBuffer:
    """Values that share one piece of storage (ordered by value id)."""

    __slots__ = ("id", "values", "size")

    def __init__(self, bid: int, values: list[HloValue]):
        self.id = bid
        self.values = values
        self.size = max(v.size for v in values)

    def __repr__(self) -> str:
        return f"<buffer {self.id}: {[v.id for v in self.values]}>"


class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        parent = self.parent
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:
            parent[i], i = root, parent[i]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # The smaller id stays the representative: buffers are named after their first value.
            self.parent[max(ra, rb)] = min(ra, rb)


class AliasAnalysis:
    """HloBuffers of a module, from its dataflow."""

    def __init__(self, module: Module, dataflow: Dataflow | None = None):
        self.module = module
        self.dataflow = dataflow or Dataflow(module)
        self._uf = _UnionFind(len(self.dataflow.values))
        self._join_control_flow()
        self._join_in_place()
        self._join_io_aliases()
        self._build()

    def buffer_of(self, value: HloValue) -> HloBuffer:
        return self._buffer_of[value.id]

    def buffer_at(self, instr, index=()) -> HloBuffer:
        return self.buffer_of(self.dataflow.value_at(instr, index))

    # ---- joins --------------------------------------------------------------------------
    def _join_trees(self, a, b) -> None:
        for index, value in leaves(a):
            other = subtree(b, index)
            if isinstance(other, HloValue):
                self._uf.union(value.id, other.id)

    def _join_control_flow(self) -> None:
        df = self.dataflow
        for comp in df.call_graph.sequential:
            for instr in comp.instructions:
                if instr.opcode == Opcode.WHILE:
                    out = df.tree(instr)
                    body, cond = while_body(instr), while_condition(instr)
                    for other in (df.tree(instr.operands[0]), df.tree(body.parameter(0)),
                                  df.tree(cond.parameter(0)), df.tree(body.root)):
                        self._join_trees(out, other)
                elif instr.opcode == Opcode.CONDITIONAL:
                    for branch in instr.called:
                        self._join_trees(df.tree(instr), df.tree(branch.root))

    def _join_in_place(self) -> None:
        df = self.dataflow
        for comp in df.call_graph.sequential:
            for instr in comp.instructions:
                for out_index, k, op_index in in_place_pairs(instr):
                    out = subtree(df.tree(instr), out_index)
                    operand = subtree(df.tree(instr.operands[k]), op_index)
                    self._join_trees(out, operand)

    def _join_io_aliases(self) -> None:
        df = self.dataflow
        entry = self.module.entry
        for alias in self.module.input_output_alias:
            out = subtree(df.tree(entry.root), alias.output_index)
            param = subtree(df.tree(entry.parameter(alias.parameter_number)), alias.parameter_index)
            self._join_trees(out, param)

    def _build(self) -> None:
        groups: dict[int, list[HloValue]] = {}
        for value in self.dataflow.values:
            groups.setdefault(self._uf.find(value.id), []).append(value)
        self.buffers: list[HloBuffer] = []
        self._buffer_of: list[HloBuffer] = [None] * len(self.dataflow.values)
        for values in groups.values():
            buf = HloBuffer(len(self.buffers), values)
            self.buffers.append(buf)
            for v in values:
                self._buffer_of[v.id] = buf
