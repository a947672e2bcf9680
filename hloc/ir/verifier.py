"""The HLO verifier: structural invariants plus declared-shape == inferred-shape for every op.

`verify(module)` raises the first VerifyError; `verify(module, all_errors=True)` returns every
error found (an empty list for a valid module). Messages read
"computation C, instruction %I: opcode: rule" (or "computation C: rule" / "module M: rule").
"""

from __future__ import annotations

from ..errors import VerifyError
from .computation import Computation
from .instruction import Instruction
from .limits import limit_problems
from .module import Module
from .opcodes import Opcode
from .shape import Shape
from .shape_inference import infer_shape, same
from .shape_inference.registry import location


class Report:
    """Collects errors; in fast mode the first one is raised at once."""

    def __init__(self, all_errors: bool, path: str | None):
        self.all_errors = all_errors
        self.path = path
        self.errors: list[VerifyError] = []

    def add(self, message: str) -> None:
        err = VerifyError(message, self.path)
        if not self.all_errors:
            raise err
        self.errors.append(err)

    def at(self, instr: Instruction, rule: str) -> None:
        self.add(f"{location(instr)}: {rule}")

    def add_error(self, err: VerifyError) -> None:
        self.add(err.message)


def verify(module: Module, *, all_errors: bool = False, path: str | None = None):
    """Check `module`; raise the first VerifyError, or with all_errors=True return them all."""
    report = Report(all_errors, path or getattr(module, "path", None))
    _check_module_structure(module, report)
    for comp in module.computations:
        _check_computation(comp, report)
    check_aliases(module, report)
    check_entry_layout(module, report)
    check_schedule(module, report)
    return report.errors if all_errors else None


def _check_module_structure(module: Module, report: Report) -> None:
    m = f"module {module.name}"
    if module.entry is None:
        report.add(f"{m}: has no entry computation")
    elif not any(c is module.entry for c in module.computations):
        report.add(f"{m}: entry computation {module.entry.name} is not one of its computations")
    comp_names: set[str] = set()
    instr_names: set[str] = set()
    for comp in module.computations:
        if comp.name in comp_names:
            report.add(f"{m}: computation name {comp.name} is used twice")
        comp_names.add(comp.name)
        if comp.parent is not module:
            report.add(f"computation {comp.name}: its parent is not module {module.name}")
        for instr in comp.instructions:
            if instr.name in instr_names:
                report.at(instr, f"instruction name {instr.name} is used twice in the module")
            instr_names.add(instr.name)
    _check_call_graph(module, report)


def _check_call_graph(module: Module, report: Report) -> None:
    """Called computations belong to the module, no computation calls itself, even indirectly
    (HLO has no recursion), and nesting and shapes stay within hloc's limits (ir/limits.py).
    Iterative, so a deeply nested module is reported, never a RecursionError."""
    owned = {id(c) for c in module.computations}
    state: dict[int, int] = {}  # 1 = on the DFS stack, 2 = done
    for root in module.computations:
        if id(root) in state:
            continue
        stack: list[tuple[Computation, bool]] = [(root, False)]
        while stack:
            comp, done = stack.pop()
            if done:
                state[id(comp)] = 2
                continue
            if id(comp) in state:
                continue
            state[id(comp)] = 1
            stack.append((comp, True))
            stack.extend((c, False) for c in _checked_callees(comp, owned, state, report))
    for comp, message, instr in limit_problems(module):
        where = f"computation {comp.name}" if comp is not None else f"module {module.name}"
        report.add(f"{where}{f', instruction {instr}' if instr else ''}: {message}")


def _checked_callees(comp: Computation, owned: set[int], state: dict[int, int],
                     report: Report) -> list[Computation]:
    """comp's callees not yet visited, reporting foreign and recursive calls."""
    todo = []
    for instr in comp.instructions:
        for callee in instr.called:
            if id(callee) not in owned:
                report.at(instr, f"calls computation {callee.name}, which is not in the module")
            elif state.get(id(callee)) == 1:
                report.at(instr, f"calls computation {callee.name} recursively")
            elif id(callee) not in state:
                todo.append(callee)
    return todo


def _check_computation(comp: Computation, report: Report) -> None:
    where = f"computation {comp.name}"
    if comp.root is None:
        report.add(f"{where}: has no root instruction")
    elif comp.root.parent is not comp:
        report.add(f"{where}: root %{comp.root.name} is not one of its instructions")
    _check_parameters(comp, report)
    structural_ok = _check_links(comp, report)
    if structural_ok and not _acyclic(comp):
        report.add(f"{where}: its instructions form a cycle")
    for instr in comp.instructions:
        _check_shape(instr, report)


def _check_parameters(comp: Computation, report: Report) -> None:
    seen: dict[int, Instruction] = {}
    for instr in comp.instructions:
        if instr.opcode != Opcode.PARAMETER:
            continue
        n = instr.attrs.parameter_number
        if n is None:
            continue  # the parameter's own shape rule reports it
        if n in seen:
            report.at(instr, f"parameter number {n} is also used by %{seen[n].name}")
        seen[n] = instr
    missing = sorted(set(range(len(seen))) - set(seen))
    if missing:
        report.add(f"computation {comp.name}: parameter numbers must be 0..{len(seen) - 1} "
                   f"without gaps; {missing[0]} is missing")


def _check_links(comp: Computation, report: Report) -> bool:
    """Parents, operands in this computation, and use lists / control edges kept symmetric."""
    members = {id(i) for i in comp.instructions}
    big_user_sets: dict[int, set[int]] = {}
    ok = True
    for instr in comp.instructions:
        if instr.parent is not comp:
            report.at(instr, "its parent is not this computation")
            ok = False
        for i, op in enumerate(instr.operands):
            if op.parent is not comp or id(op) not in members:
                report.at(instr, f"operand {i} %{op.name} is not in computation {comp.name}")
                ok = False
            elif not _is_user(op, instr, big_user_sets):
                report.at(instr, f"missing from the users of its operand %{op.name}")
        for user in instr.users:
            if id(user) not in members:
                report.at(instr, f"is used by %{user.name}, which is in another computation")
                ok = False
            elif instr not in user.operands:
                report.at(instr, f"lists %{user.name} as a user, but it is not an operand of it")
        ok = _check_control(comp, instr, report) and ok
    return ok


def _is_user(op: Instruction, instr: Instruction, cache: dict[int, set[int]]) -> bool:
    # Short use lists are scanned; long ones (a weight used 10,000 times) get a cached id set.
    users = op.users
    if len(users) <= 16:
        return instr in users
    ids = cache.get(id(op))
    if ids is None:
        ids = cache[id(op)] = {id(u) for u in users}
    return id(instr) in ids


def _check_control(comp: Computation, instr: Instruction, report: Report) -> bool:
    ok = True
    for pred in instr.control_predecessors:
        if pred.parent is not comp:
            report.at(instr, f"control predecessor %{pred.name} is in another computation")
            ok = False
        elif not any(s is instr for s in pred.control_successors):
            report.at(instr, f"control predecessor %{pred.name} does not list it as a successor")
    for succ in instr.control_successors:
        if succ.parent is not comp:
            report.at(instr, f"control successor %{succ.name} is in another computation")
            ok = False
        elif not any(p is instr for p in succ.control_predecessors):
            report.at(instr, f"control successor %{succ.name} does not list it as a predecessor")
    return ok


def _acyclic(comp: Computation) -> bool:
    """Kahn's algorithm over operand and control edges."""
    pending = {id(i): len(i.operands) + len(i.control_predecessors) for i in comp.instructions}
    ready = [i for i in comp.instructions if pending[id(i)] == 0]
    done = 0
    while ready:
        instr = ready.pop()
        done += 1
        for user in _dependents(instr):
            pending[id(user)] -= 1
            if pending[id(user)] == 0:
                ready.append(user)
    return done == len(comp.instructions)


def _dependents(instr: Instruction):
    # A user that takes `instr` twice counts it twice, like `pending` does.
    for user in instr.users:
        for op in user.operands:
            if op is instr:
                yield user
    yield from instr.control_successors


def _check_shape(instr: Instruction, report: Report) -> None:
    layout_error = _layout_error(instr.shape)
    if layout_error:
        report.at(instr, layout_error)
        return
    try:
        inferred = infer_shape(instr)
    except VerifyError as e:
        report.add_error(e)
        return
    if not same(instr.shape, inferred):
        report.at(instr, f"{instr.opcode.text}: declared shape {_text(instr.shape)} does not "
                         f"match the inferred shape {_text(inferred)}")


_VALID_LAYOUTS: set[tuple[int, ...]] = set()


def _layout_error(shape: Shape) -> str:
    if shape.is_tuple:
        for s in shape.tuple_shapes:
            err = _layout_error(s)
            if err:
                return err
        return ""
    layout = shape.layout
    if layout is None or layout.minor_to_major in _VALID_LAYOUTS or not shape.is_array:
        return ""
    m2m = layout.minor_to_major
    if sorted(m2m) != list(range(shape.rank)):
        return f"layout {layout.to_text()} is not a permutation of the {shape.rank} dimensions"
    _VALID_LAYOUTS.add(m2m)
    return ""


def _text(s: Shape) -> str:
    return s.to_text(print_layout=False)


# ---- module-level configuration ---------------------------------------------------------------


def check_aliases(module: Module, report: Report) -> None:
    """input_output_alias and buffer donors name real, compatible, distinct buffers."""
    entry = module.entry
    if entry is None or entry.root is None:
        return
    params = {p.attrs.parameter_number: p.shape for p in entry.instructions
              if p.opcode == Opcode.PARAMETER}
    m = f"module {module.name}"
    outputs: set[tuple[int, ...]] = set()
    inputs: set[tuple[int, tuple[int, ...]]] = set()
    for a in module.input_output_alias:
        what = (f"{m}: input_output_alias output {{{_index(a.output_index)}}} -> parameter "
                f"{a.parameter_number} {{{_index(a.parameter_index)}}}")
        out = _subshape(entry.root.shape, a.output_index)
        param = params.get(a.parameter_number)
        src = _subshape(param, a.parameter_index) if param is not None else None
        if out is None or src is None:
            report.add(f"{what}: names a buffer that does not exist")
        elif not out.is_array or not same(out, src):
            report.add(f"{what}: shapes {_text(src)} and {_text(out)} differ")
        elif a.kind not in (1, 2):
            report.add(f"{what}: unknown alias kind {a.kind}")
        elif a.output_index in outputs or (a.parameter_number, a.parameter_index) in inputs:
            report.add(f"{what}: the output or the parameter buffer is aliased twice")
        outputs.add(a.output_index)
        inputs.add((a.parameter_number, a.parameter_index))
    for d in module.buffer_donors:
        what = f"{m}: buffer donor parameter {d.parameter_number} {{{_index(d.parameter_index)}}}"
        param = params.get(d.parameter_number)
        if param is None or _subshape(param, d.parameter_index) is None:
            report.add(f"{what}: names a buffer that does not exist")
        elif (d.parameter_number, d.parameter_index) in inputs:
            report.add(f"{what}: is also in input_output_alias")


def _subshape(shape: Shape, index) -> Shape | None:
    for i in index:
        if not shape.is_tuple or not 0 <= i < len(shape.tuple_shapes):
            return None
        shape = shape.tuple_shapes[i]
    return shape


def _index(index) -> str:
    return ",".join(str(i) for i in index)


def check_entry_layout(module: Module, report: Report) -> None:
    """The module config's entry computation layout agrees with the entry's parameters/root."""
    layout = module.config.entry_layout
    entry = module.entry
    if layout is None or entry is None or entry.root is None:
        return
    params, result = layout
    actual = entry.parameters
    m = f"module {module.name}"
    if len(params) != len(actual):
        report.add(f"{m}: entry computation layout has {len(params)} parameters, the entry "
                   f"computation {len(actual)}")
        return
    for i, (want, p) in enumerate(zip(params, actual, strict=True)):
        if not same(want, p.shape):
            report.add(f"{m}: entry computation layout parameter {i} is {_text(want)}, the "
                       f"parameter is {_text(p.shape)}")
    if not same(result, entry.root.shape):
        report.add(f"{m}: entry computation layout result is {_text(result)}, the root is "
                   f"{_text(entry.root.shape)}")


def check_schedule(module: Module, report: Report) -> None:
    """Each scheduled computation lists every one of its instructions exactly once, after its
    operands and control predecessors."""
    if module.schedule is None:
        return
    comps = {c.name: c for c in module.computations}
    for name, sequence in module.schedule.items():
        comp = comps.get(name)
        if comp is None:
            report.add(f"module {module.name}: schedule names unknown computation {name}")
            continue
        _check_sequence(comp, sequence, report)


def _check_sequence(comp: Computation, sequence, report: Report) -> None:
    where = f"computation {comp.name}: schedule"
    by_name = {i.name: i for i in comp.instructions}
    position: dict[str, int] = {}
    for k, name in enumerate(sequence):
        if name not in by_name:
            report.add(f"{where} lists %{name}, which is not in the computation")
        elif name in position:
            report.add(f"{where} lists %{name} twice")
        position.setdefault(name, k)
    for instr in comp.instructions:
        pos = position.get(instr.name)
        if pos is None:
            report.add(f"{where} misses %{instr.name}")
            continue
        for dep in instr.operands + instr.control_predecessors:
            if position.get(dep.name, pos) > pos:
                report.add(f"{where} puts %{instr.name} before its dependency %{dep.name}")
