"""Structural limits every module must respect, checked when it is loaded and when verified.

HLO itself sets no bound on how deeply computations call each other or how large a shape is,
but hloc's walks and its int64 size arithmetic do. Rather than fail deep inside a pass (a
RecursionError at compile time while `hloc verify` accepted the module) or wrap an int64 in
generated code, loaders and the verifier refuse such modules up front with one clear line:

- MAX_CALL_DEPTH: the longest chain of computations calling one another (call, while,
  conditional, fusion, to_apply...), the entry counting as 1. Real models nest a few levels;
  compile, the bundle reader and every runtime are tested at twice this depth, so the walks
  that are still recursive (printers, thunk programs, the interpreter) stay well within
  Python's default recursion limit.
- MAX_ELEMENTS / MAX_BYTES: an array shape's element count and dense byte size must fit in a
  signed 64-bit integer (what protos, buffer offsets and generated code use).

All walks here are iterative, so the check itself cannot overflow the stack.
"""

from __future__ import annotations

from .computation import Computation
from .module import Module
from .shape import Shape

MAX_CALL_DEPTH = 64
MAX_ELEMENTS = 2**63 - 1
MAX_BYTES = 2**63 - 1


def call_depth(module: Module) -> tuple[int, Computation | None]:
    """The longest chain of nested computations and the computation heading it.

    Cycles (reported by the verifier as recursion) are cut at the back edge.
    """
    depth: dict[int, int] = {}
    best: tuple[int, Computation | None] = (0, None)
    for root in module.computations:
        if id(root) in depth:
            continue
        _depths_from(root, depth)
        if depth[id(root)] > best[0]:
            best = (depth[id(root)], root)
    return best


def _depths_from(root: Computation, depth: dict[int, int]) -> None:
    """Fill depth[id(c)] for every computation reachable from root, iteratively."""
    on_stack: set[int] = set()
    stack: list[tuple[Computation, bool]] = [(root, False)]
    while stack:
        comp, expanded = stack.pop()
        key = id(comp)
        if expanded:
            on_stack.discard(key)
            callees = [c for c in _callees(comp) if id(c) in depth]
            depth[key] = 1 + max((depth[id(c)] for c in callees), default=0)
            continue
        if key in depth or key in on_stack:
            continue
        on_stack.add(key)
        stack.append((comp, True))
        stack.extend((c, False) for c in _callees(comp) if id(c) not in depth)


def _callees(comp: Computation) -> list[Computation]:
    return [c for instr in comp.instructions for c in instr.called]


def shape_problem(shape: Shape) -> str | None:
    """Why `shape` (or one of its tuple elements) is too large, or None."""
    stack = [shape]
    while stack:
        s = stack.pop()
        if s.is_tuple:
            stack.extend(s.tuple_shapes)
            continue
        if not s.is_array or any(d < 0 for d in s.dims):
            continue
        elements = 1
        for d in s.dims:
            elements *= d
        if elements > MAX_ELEMENTS:
            return f"has {elements} elements, more than 2^63 - 1"
        if elements * max(1, (s.dtype.bits + 7) // 8) > MAX_BYTES:
            return "has a byte size that overflows a signed 64-bit integer"
    return None


def limit_problems(module: Module) -> list[tuple[Computation | None, str, str | None]]:
    """(computation, message, instruction name) for every limit `module` exceeds."""
    problems: list[tuple[Computation | None, str, str | None]] = []
    depth, head = call_depth(module)
    if depth > MAX_CALL_DEPTH:
        problems.append((head, f"computations nest {depth} deep (calls, loops, fusions...), "
                               f"more than hloc's limit of {MAX_CALL_DEPTH}", None))
    for comp in module.computations:
        for instr in comp.instructions:
            why = shape_problem(instr.shape)
            if why is not None:
                problems.append((comp, f"shape {why}", instr.name))
    return problems


def check_limits(module: Module, path: str | None = None) -> None:
    """Raise InputError (exit 2) naming `path` and the first limit `module` exceeds."""
    from ..errors import InputError

    problems = limit_problems(module)
    if not problems:
        return
    comp, message, instr = problems[0]
    where = f"computation {comp.name}" if comp is not None else f"module {module.name}"
    if instr is not None:
        where += f", instruction {instr}"
    raise InputError(f"{where}: {message}", path)
