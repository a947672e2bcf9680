"""Sequential scheduling: one instruction order per sequential computation.

Three orderings, all respecting operands and control dependencies:
- "list": a greedy memory-minimizing list scheduler. Among ready instructions it picks the one
  with the largest (bytes freed - bytes allocated), ties broken by post order. Priorities
  change as buffers lose readers, so the ready set is a heap with lazy re-insertion: the work
  is O(n log n) in instructions plus buffer touches.
- "dfs": a post order that visits the operand with the largest transitive footprint first,
  so big subtrees finish (and free their temporaries) before the next starts.
- "post-order": the plain dataflow post order.
"auto" runs all three and keeps, per computation, the order with the smallest peak of live
temporary bytes (list wins ties).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from ..analysis import AliasAnalysis, CallGraph
from ..analysis.storage import closure
from ..errors import InputError
from ..ir import Computation, Instruction, Module
from ..registry import Registry
from .memory_model import MemoryModel

Scheduler = Callable[[MemoryModel], list[Instruction]]
ALGORITHMS: Registry[str, Scheduler] = Registry("scheduling algorithm")
_algorithm = ALGORITHMS.register


def _predecessors(instr: Instruction) -> list[Instruction]:
    return list(dict.fromkeys(instr.operands + instr.control_predecessors))


@_algorithm("post-order")
def post_order_schedule(model: MemoryModel) -> list[Instruction]:
    return model.comp.post_order()


@_algorithm("list")
def list_schedule(model: MemoryModel) -> list[Instruction]:
    return _ListScheduler(model).run()


class _ListScheduler:
    def __init__(self, model: MemoryModel):
        self.model = model
        order = model.comp.post_order()
        self.rank = {instr: i for i, instr in enumerate(order)}
        self.waiting = {instr: len(_predecessors(instr)) for instr in order}
        self.touchers = model.touchers()
        self.pending = {b: len(t) for b, t in self.touchers.items()}
        self.allocated: set[int] = set()
        self.done: set[Instruction] = set()
        self.version: dict[Instruction, int] = {}
        self.heap: list[tuple[int, int, int, Instruction]] = []

    def priority(self, instr: Instruction) -> int:
        size = self.model.size
        freed = sum(size.get(b, 0) for b in self.model.touches[instr] if self.pending[b] == 1)
        allocated = sum(size.get(b, 0) for b in self.model.defines[instr] if b not in self.allocated)
        return freed - allocated

    def push(self, instr: Instruction) -> None:
        v = self.version.get(instr, 0) + 1
        self.version[instr] = v
        heapq.heappush(self.heap, (-self.priority(instr), self.rank[instr], v, instr))

    def run(self) -> list[Instruction]:
        for instr, n in self.waiting.items():
            if n == 0:
                self.push(instr)
        out: list[Instruction] = []
        while self.heap:
            _, _, v, instr = heapq.heappop(self.heap)
            if instr in self.done or v != self.version[instr]:
                continue
            self.schedule(instr)
            out.append(instr)
        if len(out) != len(self.waiting):
            raise InputError(f"computation {self.model.comp.name} has a dependency cycle "
                             f"(operands and control predecessors)")
        return out

    def schedule(self, instr: Instruction) -> None:
        self.done.add(instr)
        self.allocated.update(self.model.defines[instr])
        for b in self.model.touches[instr]:
            self.pending[b] -= 1
            if self.pending[b] == 1:
                self._boost_last_toucher(b)
        for succ in dict.fromkeys(instr.users + instr.control_successors):
            if succ in self.waiting:
                self.waiting[succ] -= 1
                if self.waiting[succ] == 0:
                    self.push(succ)

    def _boost_last_toucher(self, b: int) -> None:
        if b not in self.model.size:
            return
        for other in self.touchers[b]:
            if other not in self.done and self.waiting[other] == 0:
                self.push(other)


_CAP = 1 << 60


@_algorithm("dfs")
def dfs_schedule(model: MemoryModel) -> list[Instruction]:
    post = model.comp.post_order()
    weight: dict[Instruction, tuple[int, int]] = {}
    for instr in post:
        own = sum(model.size.get(b, 0) for b in model.defines[instr])
        preds = _predecessors(instr)
        # Sums over a DAG double count shared operands; cap them so they stay comparable.
        weight[instr] = (min(_CAP, own + sum(weight[p][0] for p in preds)),
                         min(_CAP, 1 + sum(weight[p][1] for p in preds)))
    out: list[Instruction] = []
    seen: set[Instruction] = set()
    # Start from the root so each operand subtree completes before the next one starts.
    for start in [model.comp.root, *reversed(post)]:
        stack = [(start, False)]
        while stack:
            instr, expanded = stack.pop()
            if expanded:
                out.append(instr)
                continue
            if instr in seen:
                continue
            seen.add(instr)
            stack.append((instr, True))
            preds = sorted(_predecessors(instr), key=weight.__getitem__)
            # The heaviest operand must be visited first, so it goes on the stack last.
            stack.extend((p, False) for p in preds if p not in seen)
    return out


def candidate_orders(alias: AliasAnalysis, comp: Computation, algorithm: str = "auto"
                     ) -> dict[str, list[Instruction]]:
    """Orders of one computation by name. For "auto": every algorithm's, plus under "auto"
    the one with the smallest modelled peak (list wins ties)."""
    model = MemoryModel(alias, comp, closure(comp))
    if algorithm != "auto":
        return {algorithm: ALGORITHMS.lookup(algorithm)(model)}
    orders = {name: ALGORITHMS.lookup(name)(model) for name in ("list", "dfs", "post-order")}
    peaks = {name: model.peak(order) for name, order in orders.items()}
    orders["auto"] = orders[min(orders, key=lambda n: peaks[n])]
    return orders


Schedule = dict[Computation, list[Instruction]]


def candidate_schedules(module: Module, algorithm: str = "auto",
                        alias: AliasAnalysis | None = None) -> dict[str, Schedule]:
    """Whole-module schedules to choose from: for "auto", the per-computation modelled best
    ("auto") and each algorithm applied everywhere; otherwise just `algorithm`'s. Duplicate
    schedules are dropped."""
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise InputError(f"unknown scheduler '{algorithm}' (choose from auto, "
                         f"{', '.join(sorted(ALGORITHMS))})")
    alias = alias or AliasAnalysis(module)
    graph = alias.dataflow.call_graph if alias.dataflow.call_graph.module is module else CallGraph(module)
    out: dict[str, Schedule] = {}
    for comp in graph.sequential:
        for name, order in candidate_orders(alias, comp, algorithm).items():
            out.setdefault(name, {})[comp] = order
    names = ["auto", "list", "dfs", "post-order"] if algorithm == "auto" else [algorithm]
    unique: dict[str, Schedule] = {}
    seen: set[tuple] = set()
    for name in names:
        key = tuple(tuple(map(id, order)) for order in out[name].values())
        if key not in seen:
            seen.add(key)
            unique[name] = out[name]
    return unique


def store_schedule(module: Module, schedule: Schedule) -> dict[str, list[str]]:
    """Record a schedule in the module (computation name -> instruction names)."""
    module.schedule = {comp.name: [i.name for i in order] for comp, order in schedule.items()}
    return module.schedule


def schedule_module(module: Module, algorithm: str = "auto", alias: AliasAnalysis | None = None
                    ) -> dict[str, list[str]]:
    """Schedule every sequential computation by the memory model; stores and returns
    module.schedule. (hloc.plan.plan picks among candidate_schedules by assigning each.)"""
    candidates = candidate_schedules(module, algorithm, alias)
    return store_schedule(module, next(iter(candidates.values())))
