"""Loop-state surgery shared by the while-loop passes: owning a loop's computations, finding
dead state elements and rebuilding a while with a different state tuple."""

from __future__ import annotations

from ..ir import Computation, Instruction, Module, Opcode, Shape, clone_computation
from .rewrite import computation_has_side_effects, has_side_effects, new

Op = Opcode


def own_computation(wl: Instruction, comp: Computation) -> Computation:
    """`comp` (one of wl's called computations), cloned first if any other instruction also
    calls it, so editing it cannot change another loop."""
    module: Module = wl.parent.parent
    shared = any(c is comp and user is not wl
                 for caller in module.computations for user in caller.instructions
                 for c in user.called)
    if not shared:
        return comp
    copy = clone_computation(comp, keep_ids=False)
    module.add_computation(copy)
    # Keep callees before their callers in the module's list (the proto order).
    module.computations.remove(copy)
    module.computations.insert(module.computations.index(wl.parent), copy)
    wl.called[wl.called.index(comp)] = copy
    return copy


def param_element_users(comp: Computation) -> list[Instruction] | None:
    """The get-tuple-element users of parameter 0, or None if it is used any other way."""
    param = comp.parameter(0)
    if any(u.opcode != Op.GET_TUPLE_ELEMENT for u in param.users) or param.is_root:
        return None
    return list(param.users)


def element_dependencies(body: Computation) -> list[set[int]]:
    """For each element j of the body's result tuple, the parameter elements it reads."""
    param = body.parameter(0)
    reads: dict[int, frozenset[int]] = {}
    for instr in body.post_order():
        if instr.opcode == Op.GET_TUPLE_ELEMENT and instr.operands[0] is param:
            reads[id(instr)] = frozenset({instr.attrs.tuple_index})
        else:
            reads[id(instr)] = frozenset().union(*(reads[id(o)] for o in instr.operands))
    return [set(reads[id(op)]) for op in body.root.operands]


def dead_elements(wl: Instruction) -> list[int]:
    """State elements nothing observes: not read by the condition, not read after the loop
    and not needed to compute any element that is (empty if the loop is not analyzable)."""
    cond, body = wl.while_condition, wl.while_body
    if body.root.opcode != Op.TUPLE or wl.is_root:
        return []
    if computation_has_side_effects(cond) or computation_has_side_effects(body):
        return []
    cond_users, body_users = param_element_users(cond), param_element_users(body)
    if cond_users is None or body_users is None:
        return []
    if any(u.opcode != Op.GET_TUPLE_ELEMENT for u in wl.users):
        return []
    live = {u.attrs.tuple_index for u in cond_users} | {u.attrs.tuple_index for u in wl.users}
    deps = element_dependencies(body)
    stack = list(live)
    while stack:
        for k in deps[stack.pop()]:
            if k not in live:
                live.add(k)
                stack.append(k)
    return [k for k in range(len(body.root.operands)) if k not in live]


def remove_dead_code(comp: Computation) -> None:
    """Remove unused side-effect-free instructions (parameters stay)."""
    for instr in reversed(comp.post_order()):
        if instr.users or instr.is_root or instr.opcode == Op.PARAMETER:
            continue
        if instr.control_successors or instr.control_predecessors or has_side_effects(instr):
            continue
        comp.remove(instr)


def state_element(comp: Computation, state: Instruction, k: int) -> Instruction:
    """Element k of a tuple-shaped value in `comp` (the tuple's operand when it is one)."""
    if state.opcode == Op.TUPLE:
        return state.operands[k]
    return comp.add(new(Op.GET_TUPLE_ELEMENT, state.shape.tuple_shapes[k], [state], tuple_index=k))


def _rebuild_body_root(body: Computation, keep: list[int], extra_shapes: list[Shape],
                       state_shape: Shape) -> list[Instruction]:
    """Make the body return the kept elements plus pass-through extras; returns the extras'
    get-tuple-elements (body-side values of the new elements)."""
    old_root = body.root
    kept = [old_root.operands[k] for k in keep]
    body.root = body.add(new(Op.TUPLE, Shape.tuple_of(v.shape for v in kept), kept))
    remove_dead_code(body)
    _renumber_parameter(body, keep, state_shape)
    param = body.parameter(0)
    extras = [body.add(new(Op.GET_TUPLE_ELEMENT, s, [param], tuple_index=len(keep) + j))
              for j, s in enumerate(extra_shapes)]
    temp = body.root
    body.root = body.add(new(Op.TUPLE, state_shape, kept + extras))
    body.remove(temp)
    body.instructions[:] = body.post_order()
    return extras


def _renumber_parameter(comp: Computation, keep: list[int], state_shape: Shape) -> None:
    position = {old: n for n, old in enumerate(keep)}
    param = comp.parameter(0)
    for user in param.users:
        user.with_attrs(tuple_index=position[user.attrs.tuple_index])
    param.shape = state_shape


def rebuild_while(wl: Instruction, keep: list[int],
                  extra_inits: list[Instruction]) -> tuple[Instruction, list[Instruction]]:
    """Replace `wl` by a loop whose state is the old elements `keep` followed by new
    loop-invariant elements initialised to `extra_inits` (instructions of wl's computation).

    Preconditions (checked by callers): both computations read the state only through
    get-tuple-element, the body returns a tuple instruction, nothing outside reads a dropped
    element, and `keep` covers every element the condition and body still need.
    Returns the new while and, for each extra element, its get-tuple-element in the body.
    """
    comp = wl.parent
    cond = own_computation(wl, wl.while_condition)
    body = own_computation(wl, wl.while_body)
    old_shapes = wl.shape.tuple_shapes
    state_shape = Shape.tuple_of([old_shapes[k] for k in keep] + [e.shape for e in extra_inits])
    extras = _rebuild_body_root(body, keep, [e.shape for e in extra_inits], state_shape)
    remove_dead_code(cond)
    _renumber_parameter(cond, keep, state_shape)
    init = wl.operands[0]
    elements = [state_element(comp, init, k) for k in keep] + list(extra_inits)
    new_init = comp.add(new(Op.TUPLE, state_shape, elements))
    new_wl = comp.add(new(Op.WHILE, state_shape, [new_init], called=[body, cond]))
    new_wl.metadata = wl.metadata
    _redirect_loop_users(wl, new_wl, keep)
    comp.instructions[:] = comp.post_order()
    return new_wl, extras


def _redirect_loop_users(wl: Instruction, new_wl: Instruction, keep: list[int]) -> None:
    comp = wl.parent
    position = {old: n for n, old in enumerate(keep)}
    whole = [u for u in wl.users if u.opcode != Op.GET_TUPLE_ELEMENT]
    for user in [u for u in wl.users if u.opcode == Op.GET_TUPLE_ELEMENT]:
        user.replace_operand_with(wl, new_wl)
        user.with_attrs(tuple_index=position[user.attrs.tuple_index])
    if whole or wl.is_root:
        # Users of the whole old state get it re-gathered (every old element was kept).
        parts = [comp.add(new(Op.GET_TUPLE_ELEMENT, s, [new_wl], tuple_index=position[k]))
                 for k, s in enumerate(wl.shape.tuple_shapes)]
        wl.replace_all_uses_with(comp.add(new(Op.TUPLE, wl.shape, parts)))
    init = wl.operands[0]
    comp.remove(wl)
    if not init.users and not init.is_root and init.opcode == Op.TUPLE:
        comp.remove(init)
