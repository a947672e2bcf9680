"""Helpers for the shape-inference and verifier tests: build HLO with hloc.ir directly.

Every test file builds modules the same way.
"""

from __future__ import annotations

import re

import numpy as np

from hloc.ir import Attrs, Computation, Instruction, Module, Opcode, Shape

_ARRAY = re.compile(r"^([a-z0-9]+)\[([0-9,]*)\]$")


def sh(text: str) -> Shape:
    """'f32[2,3]' → array shape; '(f32[], s32[4])' → tuple; 'token[]' → token."""
    text = text.replace(" ", "")
    if text.startswith("("):
        return Shape.tuple_of(sh(t) for t in _split_tuple(text[1:-1]))
    if text == "token[]":
        return Shape.token()
    m = _ARRAY.match(text)
    assert m, text
    dims = [int(d) for d in m.group(2).split(",") if d]
    return Shape.array(m.group(1), dims)


def _split_tuple(body: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    if cur:
        parts.append(cur)
    return parts


class Builder:
    """Appends instructions to one computation; the last one added is the root by default."""

    def __init__(self, name: str = "main"):
        self.comp = Computation(name)
        self._params = 0

    def param(self, shape: str | Shape, name: str = "") -> Instruction:
        n = self._params
        self._params += 1
        return self.op(Opcode.PARAMETER, shape, name=name or f"p{n}", parameter_number=n)

    def op(self, opcode: Opcode, shape: str | Shape, *operands: Instruction, called=(),
           name: str = "", **attrs) -> Instruction:
        s = sh(shape) if isinstance(shape, str) else shape
        instr = Instruction(opcode, s, operands, name=name or opcode.value, called=called,
                            attrs=Attrs(**attrs))
        self.comp.add(instr)
        self.comp.root = instr
        return instr


def scalar_computation(name: str, opcode: Opcode, et: str = "f32", n: int = 1) -> Computation:
    """A reducer-style computation: 2n scalar params, combined pairwise with `opcode`."""
    b = Builder(name)
    params = [b.param(f"{et}[]") for _ in range(2 * n)]
    outs = [b.op(opcode, f"{et}[]", params[i], params[n + i]) for i in range(n)]
    if n > 1:
        b.op(Opcode.TUPLE, Shape.tuple_of(o.shape for o in outs), *outs)
    return b.comp


def comparator(name: str, types: list[str]) -> Computation:
    """A sort comparator over len(types) operands comparing the first one with LT."""
    b = Builder(name)
    params = [b.param(f"{t}[]") for t in types for _ in (0, 1)]
    b.op(Opcode.COMPARE, "pred[]", params[0], params[1], comparison_direction="LT")
    return b.comp


def module_of(entry: Computation, *callees: Computation, name: str = "m") -> Module:
    m = Module(name)
    for c in callees:
        m.add_computation(c)
    m.add_computation(entry, entry=True)
    return m


def single_op_module(opcode: Opcode, result: str | Shape, operand_shapes: list[str],
                     called=(), **attrs) -> tuple[Module, Instruction]:
    """An entry computation `params → one op`; returns (module, the op)."""
    b = Builder("main")
    params = [b.param(s) for s in operand_shapes]
    instr = b.op(opcode, result, *params, called=called, **attrs)
    return module_of(b.comp, *called), instr


def numpy_pad(x: np.ndarray, cfg) -> np.ndarray:
    """XLA pad computed with numpy: interior padding by scattering into a strided buffer, then
    edge padding (negative edges crop). Independent of the shape formula under test."""
    for axis, p in enumerate(cfg):
        n = x.shape[axis]
        inner = n + (n - 1) * p.interior if n else 0
        buf = np.zeros(x.shape[:axis] + (inner,) + x.shape[axis + 1:], x.dtype)
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(0, inner, p.interior + 1)
        buf[tuple(idx)] = x
        widths = [(0, 0)] * x.ndim
        widths[axis] = (max(p.low, 0), max(p.high, 0))
        buf = np.pad(buf, widths)
        idx[axis] = slice(max(-p.low, 0), max(buf.shape[axis] - max(-p.high, 0), 0))
        x = buf[tuple(idx)]
    return x
