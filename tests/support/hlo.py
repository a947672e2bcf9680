"""Building HLO in tests: a Builder for modules in Python, text templates for one-op modules,
and running a pass spec with the verifier after every pass."""

from __future__ import annotations

import re

import numpy as np

from hloc.ir import Attrs, Computation, Instruction, Literal, Module, Opcode, Shape
from hloc.passes import PassRunner, parse_spec


class Builder:
    """Builds one computation: `b.param(shape)`, `b.op(Opcode.ADD, shape, x, y, **attrs)`."""

    def __init__(self, name: str = "main"):
        self.comp = Computation(name)
        self._params = 0

    def param(self, shape: Shape | str, name: str = "") -> Instruction:
        shape = parse_shape(shape)
        n = self._params
        self._params += 1
        return self.comp.create(Opcode.PARAMETER, shape, name=name or f"p{n}",
                                attrs=Attrs(parameter_number=n))

    def op(self, opcode: Opcode, shape: Shape | str, *operands: Instruction, called=(),
           name: str = "", **attrs) -> Instruction:
        return self.comp.create(opcode, parse_shape(shape), list(operands), called=called,
                                name=name, attrs=Attrs(**attrs))

    def const(self, value, dtype: str = "f32") -> Instruction:
        arr = np.asarray(value)
        from hloc.ir import dtypes

        et = dtypes.from_name(dtype)
        lit = Literal(Shape.array(et, arr.shape), arr.astype(dtypes.to_numpy(et)))
        return self.comp.create(Opcode.CONSTANT, lit.shape, attrs=Attrs(literal=lit))

    def splat(self, value, shape: Shape | str) -> Instruction:
        shape = parse_shape(shape)
        c = self.const(value, shape.dtype.name)
        return self.op(Opcode.BROADCAST, shape, c, dimensions=())

    def finish(self, root: Instruction) -> Computation:
        self.comp.root = root
        return self.comp


def parse_shape(shape: Shape | str) -> Shape:
    """'f32[2,3]' → Shape (row-major layout)."""
    if isinstance(shape, Shape):
        return shape
    m = re.fullmatch(r"(\w+)\[([\d,]*)\]", shape)
    assert m, shape
    dims = [int(d) for d in m.group(2).split(",") if d]
    return Shape.array(m.group(1), dims)


def module_of(entry: Computation, *callees: Computation, name: str = "m") -> Module:
    m = Module(name)
    for c in callees:
        m.add_computation(c)
    m.add_computation(entry, entry=True)
    return m


def reducer(opcode: Opcode, dtype: str = "f32", name: str = "") -> Computation:
    b = Builder(name or f"red_{opcode.value}")
    x, y = b.param(f"{dtype}[]"), b.param(f"{dtype}[]")
    return b.finish(b.op(opcode, f"{dtype}[]" if opcode != Opcode.COMPARE else "pred[]", x, y))


def reducer_text(op: str, dtype: str = "f32", name: str = "") -> str:
    """HLO text of a scalar computation `name` (default r_OP_DTYPE): op(x, y)."""
    return f"""
{name or f"r_{op}_{dtype}"} {{
  x = {dtype}[] parameter(0)
  y = {dtype}[] parameter(1)
  ROOT s = {dtype}[] {op}(x, y)
}}
"""


def arg_reducer_text(name: str, direction: str = "LT", dtype: str = "f32") -> str:
    """HLO text of jax's argmin (direction LT) or argmax (GT) reducer `name` over (value,
    s32 index) pairs: a NaN wins, ties keep the lower index."""
    return f"""
{name} {{
  a = {dtype}[] parameter(0)
  ai = s32[] parameter(1)
  b = {dtype}[] parameter(2)
  bi = s32[] parameter(3)
  better = pred[] compare(a, b), direction={direction}
  nan = pred[] compare(a, a), direction=NE
  first = pred[] or(better, nan)
  v = {dtype}[] select(first, a, b)
  eq = pred[] compare(a, b), direction=EQ
  lower = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lower)
  pick = pred[] or(first, tie)
  i = s32[] select(pick, ai, bi)
  ROOT t = ({dtype}[], s32[]) tuple(v, i)
}}
"""


def run_passes(module: Module, spec: str) -> bool:
    """Run a pass spec with the verifier after every pass (the test configuration)."""
    return PassRunner(parse_spec(spec), verify=True).run(module)


def opcodes(comp: Computation) -> list[str]:
    return [i.opcode.value for i in comp.post_order()]


def fused_ops(module, fusion_name_pattern: str = "") -> list[list[str]]:
    """Opcodes inside each fused computation (parameters left out)."""
    return [[i.opcode.value for i in c.instructions if i.opcode != Opcode.PARAMETER]
            for c in module.computations if c.is_fusion and fusion_name_pattern in c.name]


# ---- one-op modules as HLO text --------------------------------------------------------------

def conv_out_size(n: int, k: int, stride: int = 1, pad=(0, 0), lhs: int = 1, rhs: int = 1) -> int:
    """A convolution's output size along one spatial dim: input n dilated by `lhs`, padded by
    `pad` (low, high), window k dilated by `rhs`, every `stride`-th position (XLA's rule)."""
    padded = (n - 1) * lhs + 1 + pad[0] + pad[1]
    return max(0, (padded - ((k - 1) * rhs + 1)) // stride + 1)


def dims_text(shape) -> str:
    """`[n]` for an int, `[a,b]` for a sequence; a string (e.g. "[4]{0}") as it is."""
    if isinstance(shape, str):
        return shape
    if isinstance(shape, int):
        return f"[{shape}]"
    return f"[{','.join(str(d) for d in shape)}]"


def nary(op: str, dtype: str, shape, n: int, out: str | None = None, attrs: str = "") -> str:
    """A module whose entry applies `op` to `n` parameters of type `dtype[shape]`; the result
    is `out[shape]` (default `dtype`). `attrs` is appended to the instruction verbatim
    (", direction=LT")."""
    dims = dims_text(shape)
    params = "".join(f"  p{i} = {dtype}{dims} parameter({i})\n" for i in range(n))
    args = ", ".join(f"p{i}" for i in range(n))
    return f"HloModule m\nENTRY e {{\n{params}  ROOT r = {out or dtype}{dims} {op}({args}){attrs}\n}}\n"


def unary(op: str, dtype: str, shape, out: str | None = None, attrs: str = "") -> str:
    return nary(op, dtype, shape, 1, out, attrs)


def binary(op: str, dtype: str, shape, out: str | None = None, attrs: str = "") -> str:
    return nary(op, dtype, shape, 2, out, attrs)


def quantized_matmul(dtype: str, m: int, k: int, n: int) -> str:
    """A `dtype` [m, k] @ [k, n] product accumulated in s32 and dequantized by row scales (f32)."""
    return f"""HloModule q
ENTRY e {{
  a = {dtype}[{m},{k}]{{1,0}} parameter(0)
  b = {dtype}[{k},{n}]{{1,0}} parameter(1)
  sa = f32[{m}]{{0}} parameter(2)
  d = s32[{m},{n}]{{1,0}} dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  c = f32[{m},{n}]{{1,0}} convert(d)
  s = f32[{m},{n}]{{1,0}} broadcast(sa), dimensions={{0}}
  ROOT m = f32[{m},{n}]{{1,0}} multiply(c, s)
}}
"""
