"""Loop-invariant code motion for while loops (used by the while-loop simplifier)."""

from __future__ import annotations

from dataclasses import field

from ..ir import Computation, Instruction, Opcode
from ..util.record import dataclass
from .bitcast_reshapes import moves_elements
from .rewrite import has_side_effects
from .while_loop_state import (
    own_computation,
    param_element_users,
    rebuild_while,
    remove_dead_code,
    state_element,
)

Op = Opcode

# Worth a state element only together with real work: alone they are free or nearly so.
_NOT_WORTH_ALONE = frozenset({
    Op.BITCAST, Op.BROADCAST, Op.CONSTANT, Op.RESHAPE, Op.REVERSE, Op.SLICE, Op.TRANSPOSE, Op.TUPLE,
    Op.GET_TUPLE_ELEMENT, Op.COPY, Op.IOTA, Op.CONVERT,
})
# Control flow may be expensive when the loop would not have run it at all.
_NEVER_HOISTED = frozenset({Op.PARAMETER, Op.CONSTANT, Op.WHILE, Op.CONDITIONAL, Op.IOTA})


@dataclass
class _Plan:
    """What to hoist: instructions in post order and the ones whose values the body keeps."""

    hoisted: list[Instruction] = field(default_factory=list)
    frontier: list[Instruction] = field(default_factory=list)


def _invariant_elements(body: Computation) -> set[int]:
    param = body.parameter(0)
    return {k for k, op in enumerate(body.root.operands)
            if op.opcode == Op.GET_TUPLE_ELEMENT and op.operands[0] is param
            and op.attrs.tuple_index == k}


def _worth_alone(instr: Instruction) -> bool:
    if instr.opcode in (Op.TRANSPOSE, Op.COPY):
        return moves_elements(instr)
    return instr.opcode not in _NOT_WORTH_ALONE


def _size_inflating(instr: Instruction) -> bool:
    return instr.shape.byte_size > sum(o.shape.byte_size for o in instr.operands)


def plan_hoisting(body: Computation, hoist_size_inflating: bool) -> _Plan:
    """Pure array-valued instructions computed only from invariant elements and constants."""
    invariant = _invariant_elements(body)
    param = body.parameter(0)
    sources: set[int] = set()  # invariant elements read in the body: available before the loop
    hoisted: dict[int, bool] = {}  # id -> worth hoisting
    effects: dict[int, bool] = {}
    plan = _Plan()
    for instr in body.post_order():
        if instr.opcode == Op.GET_TUPLE_ELEMENT and instr.operands[0] is param:
            if instr.attrs.tuple_index in invariant:
                sources.add(id(instr))
            continue
        if instr.opcode in _NEVER_HOISTED or not instr.shape.is_array or not instr.operands:
            continue
        if has_side_effects(instr, effects):
            continue
        if not hoist_size_inflating and _size_inflating(instr):
            continue
        ops = instr.operands
        if not all(id(o) in sources or id(o) in hoisted or o.opcode == Op.CONSTANT for o in ops):
            continue
        if not any(id(o) in sources or id(o) in hoisted for o in ops):
            continue  # constants only: constant folding's job
        hoisted[id(instr)] = (_worth_alone(instr)
                              or any(hoisted.get(id(o), False) for o in ops))
        plan.hoisted.append(instr)
    plan.frontier = [i for i in plan.hoisted
                     if hoisted[id(i)] and any(id(u) not in hoisted for u in i.users)]
    return plan


def _clone_before_loop(wl: Instruction, plan: _Plan) -> list[Instruction]:
    """Compute the frontier values in the loop's computation; returns them in frontier order."""
    comp = wl.parent
    body = wl.while_body
    param = body.parameter(0)
    init = wl.operands[0]
    mapped: dict[int, Instruction] = {}

    def value(o: Instruction) -> Instruction:
        if id(o) in mapped:
            return mapped[id(o)]
        if o.opcode == Op.CONSTANT:
            mapped[id(o)] = comp.add(Instruction(Op.CONSTANT, o.shape, attrs=o.attrs))
        else:  # an invariant element: its initial value
            assert o.operands[0] is param
            mapped[id(o)] = state_element(comp, init, o.attrs.tuple_index)
        return mapped[id(o)]

    for instr in plan.hoisted:
        clone = Instruction(instr.opcode, instr.shape, [value(o) for o in instr.operands],
                            name=instr.name, called=list(instr.called), attrs=instr.attrs,
                            metadata=instr.metadata)
        mapped[id(instr)] = comp.add(clone)
    return [mapped[id(f)] for f in plan.frontier]


def hoist_invariant_code(wl: Instruction, hoist_size_inflating: bool = False) -> Instruction | None:
    """Move invariant computations out of the loop body into new state elements computed
    before the loop; returns the new loop, or None if nothing was worth hoisting."""
    body = wl.while_body
    if body.root.opcode != Op.TUPLE or param_element_users(body) is None:
        return None
    if param_element_users(wl.while_condition) is None:
        return None
    if not plan_hoisting(body, hoist_size_inflating).frontier:
        return None
    body = own_computation(wl, wl.while_body)  # the plan must name instructions of the body we edit
    plan = plan_hoisting(body, hoist_size_inflating)
    values = _clone_before_loop(wl, plan)
    n = len(wl.shape.tuple_shapes)
    new_wl, extras = rebuild_while(wl, list(range(n)), values)
    new_body = new_wl.while_body
    for instr, gte in zip(plan.frontier, extras, strict=True):
        if instr.parent is new_body:  # (it may have been dead code the rebuild removed)
            instr.replace_all_uses_with(gte)
    remove_dead_code(new_body)
    new_body.instructions[:] = new_body.post_order()
    new_wl.parent.instructions[:] = new_wl.parent.post_order()
    return new_wl
