"""Known trip counts of while loops.

Taken from XLA's `known_trip_count` backend config when present; otherwise proven from the
induction-variable pattern: a state element initialized with an integer constant, advanced by
the body by a constant step (`add(gte(param, k), c)`), and compared against a constant by the
condition (`compare(gte(param, k), N)`). Copies and single-op loop fusions (XLA's `wrapped_*`)
are looked through.
"""

from __future__ import annotations

import json

from ..analysis.call_graph import while_body, while_condition
from ..ir import Instruction, Opcode

_LIMIT = 1 << 62


def known_trip_count(loop: Instruction) -> int | None:
    count = _from_backend_config(loop.attrs.backend_config)
    if count is not None:
        return count
    try:
        return _from_pattern(loop)
    except (ValueError, IndexError, AttributeError, TypeError):
        return None


def _from_backend_config(config: str | None) -> int | None:
    if not config or "known_trip_count" not in config:
        return None
    try:
        n = json.loads(config)["known_trip_count"]["n"]
        return int(n)
    except (ValueError, KeyError, TypeError):
        return None


def _expr(instr: Instruction) -> tuple[Opcode, Instruction, list[Instruction]]:
    """(opcode, the instruction carrying its attrs, operands) seeing through copies and
    fusions that wrap a single op of their parameters."""
    while instr.opcode == Opcode.COPY:
        instr = instr.operands[0]
    if instr.opcode == Opcode.FUSION:
        root = instr.called[0].root
        if all(op.opcode == Opcode.PARAMETER for op in root.operands):
            return root.opcode, root, [instr.operands[op.attrs.parameter_number]
                                       for op in root.operands]
    return instr.opcode, instr, list(instr.operands)


def _constant(instr: Instruction) -> int | None:
    op, carrier, _ = _expr(instr)
    if op != Opcode.CONSTANT or carrier.shape.rank != 0 or \
            carrier.shape.dtype.kind not in ("int", "uint"):
        return None
    return int(carrier.literal.item())


def _slot(instr: Instruction, param: Instruction) -> int | None:
    op, carrier, operands = _expr(instr)
    if op == Opcode.GET_TUPLE_ELEMENT and operands[0] is param:
        return carrier.attrs.tuple_index
    return None


_SWAP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def _condition(loop: Instruction) -> tuple[int, str, int] | None:
    """(slot, direction, bound) for `slot <direction> bound`."""
    cond = while_condition(loop)
    op, carrier, operands = _expr(cond.root)
    if op != Opcode.COMPARE or len(operands) != 2:
        return None
    param = cond.parameter(0)
    direction = carrier.attrs.comparison_direction
    for a, b, d in ((0, 1, direction), (1, 0, _SWAP.get(direction, ""))):
        slot, bound = _slot(operands[a], param), _constant(operands[b])
        if slot is not None and bound is not None:
            return slot, d, bound
    return None


def _step(loop: Instruction, slot: int) -> int | None:
    body = while_body(loop)
    param = body.parameter(0)
    root = body.root
    if root.opcode != Opcode.TUPLE:
        return None
    op, _, operands = _expr(root.operands[slot])
    if op != Opcode.ADD:
        return None
    for a, b in ((0, 1), (1, 0)):
        if _slot(operands[a], param) == slot and _constant(operands[b]) is not None:
            return _constant(operands[b])
    return None


def _init(loop: Instruction, slot: int) -> int | None:
    init = loop.operands[0]
    while init.opcode == Opcode.COPY:
        init = init.operands[0]
    if init.opcode != Opcode.TUPLE:
        return None
    return _constant(init.operands[slot])


def _from_pattern(loop: Instruction) -> int | None:
    found = _condition(loop)
    if found is None:
        return None
    slot, direction, bound = found
    step, start = _step(loop, slot), _init(loop, slot)
    if step is None or start is None or step == 0:
        return None
    count = _count(start, step, direction, bound)
    return count if count is not None and 0 <= count < _LIMIT else None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _count(start: int, step: int, direction: str, bound: int) -> int | None:
    if direction == "LT" and step > 0:
        return max(0, _ceil_div(bound - start, step))
    if direction == "LE" and step > 0:
        return max(0, (bound - start) // step + 1)
    if direction == "GT" and step < 0:
        return max(0, _ceil_div(start - bound, -step))
    if direction == "GE" and step < 0:
        return max(0, (start - bound) // -step + 1)
    if direction == "NE" and (bound - start) % step == 0 and (bound - start) // step >= 0:
        return (bound - start) // step
    return None
