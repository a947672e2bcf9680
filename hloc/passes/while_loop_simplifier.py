"""While-loop simplification: known trip counts, dead loop state and loop-invariant code."""

from __future__ import annotations

import operator

from ..ir import Computation, Instruction, Module, Opcode, PrimitiveType, dtypes
from ..util.log import get_logger
from ..util.record import dataclass
from .base import Pass, register_pass
from .call_inliner import inline_call
from .conditional_simplifier import remove_unreachable_computations
from .rewrite import computation_has_side_effects, new, splat_value, update_schedule
from .while_loop_licm import hoist_invariant_code
from .while_loop_state import (
    dead_elements,
    rebuild_while,
)

log = get_logger("hloc.passes.while_loop_simplifier")
Op = Opcode

_COMPARE = {"LT": operator.lt, "LE": operator.le, "GT": operator.gt, "GE": operator.ge,
            "EQ": operator.eq, "NE": operator.ne}
_MIRROR = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


# ---- trip counts -----------------------------------------------------------------------------
def _is_element(instr: Instruction, param: Instruction) -> int | None:
    if instr.opcode == Op.GET_TUPLE_ELEMENT and instr.operands[0] is param:
        return instr.attrs.tuple_index
    return None


def _constant_init(wl: Instruction, k: int):
    """The constant initial value of state element k, or None."""
    init = wl.operands[0]
    if init.opcode == Op.TUPLE:
        element = init.operands[k]
        return splat_value(element) if element.shape.rank == 0 else None
    if init.opcode == Op.CONSTANT:
        element = init.literal.elements[k]
        return element.item() if element.shape.is_array and element.shape.rank == 0 else None
    return None


def _invariant(wl: Instruction, k: int) -> bool:
    body = wl.while_body
    root = body.root
    return root.opcode == Op.TUPLE and _is_element(root.operands[k], body.parameter(0)) == k


def _loop_constant(wl: Instruction, instr: Instruction, param: Instruction):
    """The value of a condition operand fixed for the whole loop: a constant or an invariant
    element with a constant initial value."""
    if instr.opcode == Op.CONSTANT and instr.shape.rank == 0:
        return splat_value(instr)
    k = _is_element(instr, param)
    if k is not None and _invariant(wl, k):
        return _constant_init(wl, k)
    return None


@dataclass(frozen=True)
class InductionVariable:
    """Element `index` starts at `init`, moves by `step` each iteration and the loop runs
    while `compare(value, bound)` holds."""

    index: int
    init: int
    step: int
    direction: str
    bound: int
    ptype: PrimitiveType  # the element's integer type

    def trip_count(self, limit: int) -> int | None:
        """Iterations until the condition fails, or None if more than `limit`."""
        value = self.init
        test = _COMPARE[self.direction]
        for n in range(limit + 1):
            if not test(value, self.bound):
                return n
            value = dtypes.info(self.ptype).wrap(value + self.step)  # as the loop's add
        return None


def _condition(wl: Instruction):
    """(element index, direction, bound) of a condition `compare(element, loop constant)`."""
    cond = wl.while_condition
    root, param = cond.root, cond.parameter(0)
    if root.opcode != Op.COMPARE or root.shape.rank != 0:
        return None
    direction = root.attrs.comparison_direction
    for side, (a, b) in enumerate((root.operands, root.operands[::-1])):
        k, bound = _is_element(a, param), _loop_constant(wl, b, param)
        if k is not None and bound is not None and direction in _COMPARE:
            return k, (direction if side == 0 else _MIRROR[direction]), bound
    return None


def _step(body: Computation, k: int) -> int | None:
    """The constant the body adds to element k each iteration (0 if unchanged)."""
    param = body.parameter(0)
    update = body.root.operands[k]
    if _is_element(update, param) == k:
        return 0
    if update.opcode not in (Op.ADD, Op.SUBTRACT):
        return None
    a, b = update.operands
    if update.opcode == Op.ADD and _is_element(b, param) == k:
        a, b = b, a
    if _is_element(a, param) != k or b.opcode != Op.CONSTANT:
        return None
    step = int(splat_value(b))
    return step if update.opcode == Op.ADD else -step


def induction_variable(wl: Instruction) -> InductionVariable | None:
    """Match the counted-loop pattern `i = c0; while (i < n) { ...; i = i + c }`."""
    body = wl.while_body
    found = _condition(wl) if body.root.opcode == Op.TUPLE else None
    if found is None:
        return None
    k, direction, bound = found
    element_shape = wl.shape.tuple_shapes[k]
    if element_shape.rank != 0 or element_shape.dtype.kind not in ("int", "uint"):
        return None
    init, step = _constant_init(wl, k), _step(body, k)
    if init is None or step is None:
        return None
    return InductionVariable(k, int(init), step, direction, int(bound),
                             element_shape.element_type)


def trip_count(wl: Instruction, limit: int = 1) -> int | None:
    """The loop's trip count if it is known and at most `limit`."""
    root = wl.while_condition.root
    if root.opcode == Op.CONSTANT:
        return 0 if not bool(splat_value(root)) else None
    iv = induction_variable(wl)
    return iv.trip_count(limit) if iv is not None else None


# ---- transformations -------------------------------------------------------------------------
def remove_zero_trip_loop(wl: Instruction) -> bool:
    """A loop whose condition fails on entry is its initial state."""
    init = wl.operands[0]
    if init.shape != wl.shape:
        return False
    wl.replace_all_uses_with(init)
    wl.parent.remove(wl)
    return True


def inline_single_trip_loop(wl: Instruction) -> bool:
    """A loop that runs once is its body applied to the initial state."""
    comp = wl.parent
    body = wl.while_body
    if body.root.shape != wl.shape:
        return False
    call = comp.add(new(Op.CALL, wl.shape, [wl.operands[0]], called=[body]))
    call.metadata = wl.metadata
    wl.replace_all_uses_with(call)
    comp.remove(wl)
    inline_call(call)
    comp.instructions[:] = comp.post_order()
    return True


def remove_dead_elements(wl: Instruction) -> Instruction | None:
    """Drop state elements nothing observes; returns the new loop (None if unchanged)."""
    dead = dead_elements(wl)
    if not dead:
        return None
    keep = [k for k in range(len(wl.shape.tuple_shapes)) if k not in set(dead)]
    new_wl, _ = rebuild_while(wl, keep, [])
    return new_wl


def _pure_condition(wl: Instruction) -> bool:
    return not computation_has_side_effects(wl.while_condition)


def simplify_loop(wl: Instruction, licm: bool, hoist_size_inflating: bool) -> bool:
    """Apply the first applicable simplification chain to one loop."""
    trips = trip_count(wl, limit=1) if _pure_condition(wl) else None
    if trips == 0:
        return remove_zero_trip_loop(wl)
    if trips == 1:
        return inline_single_trip_loop(wl)
    changed = False
    rebuilt = remove_dead_elements(wl)
    if rebuilt is not None:
        wl, changed = rebuilt, True
    if licm and hoist_invariant_code(wl, hoist_size_inflating) is not None:
        changed = True
    return changed


@register_pass
@dataclass
class WhileLoopSimplifier(Pass):
    """Simplifies while loops: removes loops that never run, inlines loops that run once,
    drops unobserved state elements and hoists loop-invariant code.

    Trip counts come from the counted-loop pattern (an integer element starting at a
    constant, stepped by a constant, compared with a constant or an invariant element with a
    constant initial value) or a constant condition. Assumes: a valid module. Guarantees:
    loops with a side-effecting condition keep their trip count; state is only dropped from
    loops free of side effects; hoisted code is pure, array-valued, not control flow and (by
    default) not larger than its inputs; results are unchanged.
    """

    name = "while-loop-simplifier"
    licm: bool = True
    hoist_size_inflating: bool = False

    def run(self, module: Module) -> bool:
        changed = False
        for comp in list(module.computation_post_order()):
            loops = [i for i in comp.post_order() if i.opcode == Op.WHILE]
            for wl in loops:
                if wl.parent is not comp or wl.control_predecessors or wl.control_successors:
                    continue
                if not wl.shape.is_tuple:
                    continue
                changed |= simplify_loop(wl, self.licm, self.hoist_size_inflating)
        if changed:
            remove_unreachable_computations(module)
            update_schedule(module)
        return changed
