"""The shared local-rewrite driver: rule tables applied to a fixpoint with a worklist.

A rule is a `Pattern` (an opcode set plus optional operand patterns and a predicate) and a
function `fn(instr) -> Instruction | None`. The function returns either an instruction that is
already in the computation or a new, detached one (built with `new`, operands may be new too);
the driver adds new instructions, redirects every use of the matched instruction, removes what
became dead and revisits the users, so rules stay small and never touch use lists themselves.

Each instruction is visited once up front (post order: operands first) and again only when an
operand or user changed, so a pass costs time linear in the module size in practice.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import field

from ..ir import Attrs, Computation, Instruction, Literal, Module, Opcode, Shape, dtypes, packing
from ..ir.computation import dfs_post_order
from ..ir.opcodes import SIDE_EFFECTING
from ..util.log import get_logger
from ..util.record import dataclass

log = get_logger("hloc.passes.rewrite")

RewriteFn = Callable[[Instruction], "Instruction | None"]


# ---- patterns and rules ---------------------------------------------------------------------
@dataclass(frozen=True)
class Pattern:
    """What a rule matches: opcodes (None = any), operand patterns (None entries = anything)
    and an extra predicate on the instruction."""

    opcodes: frozenset[Opcode] | None
    operands: tuple[Pattern | None, ...] | None = None
    where: Callable[[Instruction], bool] | None = None

    def matches(self, instr: Instruction) -> bool:
        if self.opcodes is not None and instr.opcode not in self.opcodes:
            return False
        if self.operands is not None:
            if len(self.operands) != len(instr.operands):
                return False
            for sub, operand in zip(self.operands, instr.operands, strict=True):
                if sub is not None and not sub.matches(operand):
                    return False
        return self.where is None or bool(self.where(instr))


def P(opcodes: Opcode | Iterable[Opcode] | None, *operands: Pattern | None,
      where: Callable[[Instruction], bool] | None = None) -> Pattern:
    """Pattern shorthand: `P(Opcode.NEGATE, P(Opcode.NEGATE))` matches negate(negate(_))."""
    if opcodes is None:
        ops = None
    elif isinstance(opcodes, Opcode):
        ops = frozenset({opcodes})
    else:
        ops = frozenset(opcodes)
    return Pattern(ops, tuple(operands) if operands else None, where)


@dataclass(frozen=True)
class Rule:
    """One named local rewrite."""

    name: str
    pattern: Pattern
    fn: RewriteFn
    doc: str = ""


@dataclass
class RuleTable:
    """An ordered set of rules, indexed by opcode for the driver."""

    name: str
    rules: list[Rule] = field(default_factory=list)

    def rule(self, pattern: Pattern, name: str | None = None):
        """Decorator registering `fn(instr) -> replacement | None` under `pattern`."""

        def add(fn: RewriteFn) -> RewriteFn:
            doc = (fn.__doc__ or "").strip().splitlines()
            self.rules.append(Rule(name or fn.__name__, pattern, fn, doc[0] if doc else ""))
            return fn

        return add

    @staticmethod
    def merge(name: str, *tables: RuleTable) -> RuleTable:
        return RuleTable(name, [r for t in tables for r in t.rules])

    def index(self) -> _Index:
        return _Index(self)


class _Index:
    """Rules per opcode, wildcard rules appended to every list."""

    def __init__(self, table: RuleTable):
        self.by_opcode: dict[Opcode, list[Rule]] = {}
        self.wildcard = [r for r in table.rules if r.pattern.opcodes is None]
        for r in table.rules:
            for op in r.pattern.opcodes or ():
                self.by_opcode.setdefault(op, []).append(r)

    def rules_for(self, opcode: Opcode) -> list[Rule]:
        return self.by_opcode.get(opcode, []) + self.wildcard


# ---- side effects ---------------------------------------------------------------------------
def is_side_effecting(instr: Instruction) -> bool:
    """The instruction itself has an observable effect (ignores called computations)."""
    if instr.opcode in SIDE_EFFECTING:
        return True
    return instr.opcode == Opcode.CUSTOM_CALL and bool(instr.attrs.custom_call_has_side_effect)


def has_side_effects(instr: Instruction, cache: dict[int, bool] | None = None) -> bool:
    """The instruction or anything it calls (transitively) has an observable effect."""
    if is_side_effecting(instr):
        return True
    cache = {} if cache is None else cache
    return any(computation_has_side_effects(c, cache) for c in instr.called)


def computation_has_side_effects(comp: Computation, cache: dict[int, bool] | None = None) -> bool:
    cache = {} if cache is None else cache
    key = id(comp)
    if key not in cache:
        cache[key] = False  # breaks (invalid) recursion instead of looping
        cache[key] = any(has_side_effects(i, cache) for i in comp.instructions)
    return cache[key]


# ---- building replacement instructions ------------------------------------------------------
def new(opcode: Opcode, shape: Shape, operands=(), *, called=(), **attrs) -> Instruction:
    """A detached instruction for a rule to return; the driver adds it to the computation."""
    return Instruction(opcode, shape, list(operands), called=list(called), attrs=Attrs(**attrs))


def constant(literal: Literal) -> Instruction:
    return new(Opcode.CONSTANT, literal.shape, literal=literal)


def scalar_literal(value, ptype) -> Literal:
    """`value` as a scalar of `ptype`, converted as NumPy's `astype` converts (integers wrap
    around): without NumPy where ir/packing.py can say."""
    data = packing.pack((value,), ptype)
    if data is not None:
        return Literal(Shape.scalar(ptype), data=data)
    import numpy as np

    return Literal(Shape.scalar(ptype), np.asarray(value).astype(dtypes.to_numpy(ptype)))


def splat(value, shape: Shape) -> Instruction:
    """A constant of `shape` with every element `value`: a scalar constant, broadcast if needed."""
    c = constant(scalar_literal(value, shape.element_type))
    if shape.rank == 0:
        return c
    return new(Opcode.BROADCAST, shape, [c], dimensions=())


def _splat(instr: Instruction) -> tuple[Literal, bytes] | None:
    """The literal of the constant `instr` is or broadcasts and the bits every element of it
    holds; None when they differ or it is no such constant (including empty arrays)."""
    while instr.opcode == Opcode.BROADCAST:
        instr = instr.operands[0]
    if instr.opcode != Opcode.CONSTANT or not instr.shape.is_array or instr.literal is None:
        return None
    element = instr.literal.splat_bytes()
    return None if element is None else (instr.literal, element)


def splat_value(instr: Instruction):
    """The one value every element of `instr` holds, when it is a constant or a broadcast of
    one; None otherwise (including empty arrays). A Python bool, int or float where the
    literal's type has one (ir/packing.py: read without NumPy), else a NumPy scalar."""
    found = _splat(instr)
    if found is None:
        return None
    literal, element = found
    values = packing.unpack(element, literal.shape.element_type)
    return values[0] if values else literal.array.reshape(-1)[0]


def is_splat_of(instr: Instruction, value) -> bool:
    """Every element of `instr` has exactly the bits of `value` in instr's element type
    (so -0.0 and +0.0 differ, which exactness needs)."""
    found = _splat(instr)
    if found is None:
        return False
    literal, element = found
    return element == scalar_literal(value, literal.shape.element_type).data


# ---- removing instructions in bulk ----------------------------------------------------------
def detach(instr: Instruction) -> None:
    """Computation.remove without the instruction-list update (callers filter the list once
    with `drop_detached`, so removing k of n instructions costs O(n), not O(k*n))."""
    if instr.users or instr.is_root:
        raise ValueError(f"cannot remove {instr.name}: it is still used")
    for op in dict.fromkeys(instr.operands):
        if instr in op.users:
            op.users.remove(instr)
    instr.drop_all_control_deps()
    instr.parent = None


def drop_detached(comp: Computation) -> None:
    """Remove detached instructions from the computation's list."""
    comp.instructions[:] = [i for i in comp.instructions if i.parent is comp]


# ---- schedules ------------------------------------------------------------------------------
def update_schedule(module: Module) -> None:
    """Keep a scheduled module's schedule valid after a pass changed it (XLA's
    HloSchedule::Update): removed instructions leave their sequence, surviving ones keep their
    relative order, new ones go right before their first scheduled user, and every non-fusion
    computation without a sequence gets one."""
    if module.schedule is None:
        return
    names = {c.name for c in module.computations}
    for stale in [k for k in module.schedule if k not in names]:
        del module.schedule[stale]
    for comp in module.computations:
        if not comp.is_fusion:
            old = module.schedule.get(comp.name, [])
            module.schedule[comp.name] = [i.name for i in _order_after(comp, old)]


def _order_after(comp: Computation, previous: list[str]) -> list[Instruction]:
    """A dependency order that follows `previous` wherever it still applies."""
    by_name = {i.name: i for i in comp.instructions}
    seeds = [by_name[n] for n in previous if n in by_name] + comp.instructions
    return dfs_post_order(seeds, lambda i: i.operands + i.control_predecessors)


# ---- the driver -----------------------------------------------------------------------------
@dataclass
class RewriteStats:
    """How often each rule fired."""

    fired: Counter = field(default_factory=Counter)

    @property
    def changed(self) -> bool:
        return bool(self.fired)

    def __iadd__(self, other: RewriteStats) -> RewriteStats:
        self.fired.update(other.fired)
        return self


def rewrite_module(module: Module, table: RuleTable) -> RewriteStats:
    """Apply `table` to every computation of the module to a fixpoint."""
    index = table.index()
    stats = RewriteStats()
    for comp in list(module.computations):
        stats += _Driver(comp, index).run()
    if stats.changed:
        log.debug("%s: %s", table.name, dict(stats.fired))
        update_schedule(module)
    return stats


def rewrite_computation(comp: Computation, table: RuleTable) -> RewriteStats:
    return _Driver(comp, table.index()).run()


class _Driver:
    """Worklist rewriting of one computation."""

    def __init__(self, comp: Computation, index: _Index):
        self.comp = comp
        self.index = index
        self.stats = RewriteStats()
        self.queue: deque[Instruction] = deque()
        self.queued: set[int] = set()

    def push(self, instr: Instruction) -> None:
        if id(instr) not in self.queued and instr.parent is self.comp:
            self.queued.add(id(instr))
            self.queue.append(instr)

    def run(self) -> RewriteStats:
        for instr in self.comp.post_order():
            self.push(instr)
        # A guard against rule sets that undo each other; real tables never get near it.
        budget = 16 * len(self.comp.instructions) + 256
        while self.queue and budget > 0:
            instr = self.queue.popleft()
            self.queued.discard(id(instr))
            if instr.parent is not self.comp or not _rewritable(instr):
                continue
            if self.visit(instr):
                budget -= 1
        if budget <= 0:
            log.warning("rewrite budget exhausted in %s: rules may cycle", self.comp.name)
        if self.stats.changed:
            drop_detached(self.comp)
            # New instructions were appended at the end; keep the list a valid def-before-use order.
            self.comp.instructions[:] = self.comp.post_order()
        return self.stats

    def visit(self, instr: Instruction) -> bool:
        for rule in self.index.rules_for(instr.opcode):
            if not rule.pattern.matches(instr):
                continue
            replacement = rule.fn(instr)
            if replacement is None or replacement is instr:
                continue
            if replacement.shape != instr.shape:
                log.debug("rule %s: %s would change shape %s -> %s; skipped", rule.name,
                          instr.name, instr.shape, replacement.shape)
                continue
            self.replace(instr, replacement)
            self.stats.fired[rule.name] += 1
            return True
        return False

    def replace(self, old: Instruction, replacement: Instruction) -> None:
        if replacement.parent is None and replacement.metadata.is_empty():
            replacement.metadata = old.metadata  # keep op names pointing at the source line
        for added in self.materialize(replacement):
            self.push(added)
        operands = list(old.operands)
        old.replace_all_uses_with(replacement)
        for user in replacement.users:
            self.push(user)
        self.push(replacement)
        self.remove_dead(old)
        for op in operands:
            self.push(op)

    def materialize(self, instr: Instruction) -> list[Instruction]:
        """Add a detached instruction and its detached operands (operands first)."""
        added: list[Instruction] = []
        stack = [(instr, False)]
        while stack:
            cur, expanded = stack.pop()
            if cur.parent is not None:
                if cur.parent is not self.comp:
                    raise ValueError(f"rewrite used %{cur.name} from another computation")
                continue
            if expanded:
                self.comp.add(cur)
                added.append(cur)
                continue
            stack.append((cur, True))
            stack.extend((op, False) for op in cur.operands if op.parent is None)
        return added

    def remove_dead(self, instr: Instruction) -> None:
        """Remove `instr` if nothing uses it, then its operands that died with it."""
        stack = [instr]
        while stack:
            cur = stack.pop()
            if cur.parent is not self.comp or not _removable(cur):
                continue
            operands = list(dict.fromkeys(cur.operands))
            detach(cur)
            stack.extend(operands)


def _rewritable(instr: Instruction) -> bool:
    return not (is_side_effecting(instr) or instr.control_predecessors
                or instr.control_successors)


def _removable(instr: Instruction) -> bool:
    if instr.users or instr.is_root or instr.control_successors or instr.control_predecessors:
        return False
    return instr.opcode != Opcode.PARAMETER and not has_side_effects(instr)
