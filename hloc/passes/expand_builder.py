"""A small builder of detached instructions for the expanders' rewrite rules.

Expanders return whole subgraphs from a rule; the shared driver (rewrite.py) adds them. This
builder keeps those subgraphs readable: `b.add(x, y)`, `b.full(1.0, shape)`, `b.bcast(v, dims)`.
Shapes come out row-major; element types follow the operands.
"""

from __future__ import annotations

from ..ir import (
    Attrs,
    Computation,
    Instruction,
    Module,
    Opcode,
    PrimitiveType,
    Shape,
    SliceDim,
    dtypes,
)
from .rewrite import constant, new, scalar_literal

Op = Opcode


class Emit:
    """Builds detached instructions (the rewrite driver materializes them)."""

    # ---- values ---------------------------------------------------------------------------
    @staticmethod
    def scalar(value, ptype: PrimitiveType) -> Instruction:
        return constant(scalar_literal(value, ptype))

    def full(self, value, ptype: PrimitiveType, dims) -> Instruction:
        """An array of `dims` with every element `value`."""
        return self.bcast(self.scalar(value, ptype), dims)

    @staticmethod
    def bcast(x: Instruction, dims, mapping=()) -> Instruction:
        """Broadcast `x` to `dims`; `mapping` says where x's dimensions go (scalars: none)."""
        dims = tuple(dims)
        if x.shape.dims == dims and tuple(mapping) == tuple(range(len(dims))):
            return x
        if x.shape.rank == 0 and not dims:
            return x
        return new(Op.BROADCAST, Shape.array(x.shape.element_type, dims), [x],
                   dimensions=tuple(mapping))

    @staticmethod
    def iota(ptype: PrimitiveType, dims, dimension: int = 0) -> Instruction:
        return new(Op.IOTA, Shape.array(ptype, dims), dimensions=(dimension,))

    # ---- elementwise ----------------------------------------------------------------------
    @staticmethod
    def binary(opcode: Opcode, a: Instruction, b: Instruction) -> Instruction:
        return new(opcode, Shape.array(a.shape.element_type, a.shape.dims), [a, b])

    def add(self, a, b):
        return self.binary(Op.ADD, a, b)

    def sub(self, a, b):
        return self.binary(Op.SUBTRACT, a, b)

    def mul(self, a, b):
        return self.binary(Op.MULTIPLY, a, b)

    def div(self, a, b):
        return self.binary(Op.DIVIDE, a, b)

    def xor(self, a, b):
        return self.binary(Op.XOR, a, b)

    def or_(self, a, b):
        return self.binary(Op.OR, a, b)

    def shl(self, a, b):
        return self.binary(Op.SHIFT_LEFT, a, b)

    def shr(self, a, b):
        return self.binary(Op.SHIFT_RIGHT_LOGICAL, a, b)

    @staticmethod
    def unary(opcode: Opcode, x: Instruction) -> Instruction:
        return new(opcode, Shape.array(x.shape.element_type, x.shape.dims), [x])

    @staticmethod
    def convert(x: Instruction, ptype: PrimitiveType, opcode: Opcode = Op.CONVERT) -> Instruction:
        if x.shape.element_type == ptype:
            return x
        return new(opcode, Shape.array(ptype, x.shape.dims), [x])

    @staticmethod
    def compare(a: Instruction, b: Instruction, direction: str, ctype: str) -> Instruction:
        return new(Op.COMPARE, Shape.array(PrimitiveType.PRED, a.shape.dims), [a, b],
                   comparison_direction=direction, comparison_type=ctype)

    @staticmethod
    def select(p: Instruction, a: Instruction, b: Instruction) -> Instruction:
        return new(Op.SELECT, Shape.array(a.shape.element_type, a.shape.dims), [p, a, b])

    # ---- shapes ---------------------------------------------------------------------------
    @staticmethod
    def reshape(x: Instruction, dims) -> Instruction:
        dims = tuple(dims)
        if x.shape.dims == dims:
            return x
        return new(Op.RESHAPE, Shape.array(x.shape.element_type, dims), [x])

    @staticmethod
    def slice(x: Instruction, starts, limits) -> Instruction:
        dims = [hi - lo for lo, hi in zip(starts, limits, strict=True)]
        if tuple(dims) == x.shape.dims:
            return x
        return new(Op.SLICE, Shape.array(x.shape.element_type, dims), [x],
                   slice=tuple(SliceDim(lo, hi, 1) for lo, hi in zip(starts, limits, strict=True)))

    def element(self, vector: Instruction, k: int) -> Instruction:
        """Element k of a rank-1 array, as a scalar."""
        return self.reshape(self.slice(vector, [k], [k + 1]), ())

    @staticmethod
    def concat(parts: list[Instruction], dimension: int) -> Instruction:
        if len(parts) == 1:
            return parts[0]
        dims = list(parts[0].shape.dims)
        dims[dimension] = sum(p.shape.dims[dimension] for p in parts)
        return new(Op.CONCATENATE, Shape.array(parts[0].shape.element_type, dims), parts,
                   dimensions=(dimension,))

    @staticmethod
    def tuple(parts: list[Instruction], shape: Shape | None = None) -> Instruction:
        shape = shape or Shape.tuple_of(p.shape for p in parts)
        return new(Op.TUPLE, shape, parts)

    @staticmethod
    def reduce(x: Instruction, init: Instruction, dims, fn: Computation) -> Instruction:
        kept = [d for i, d in enumerate(x.shape.dims) if i not in dims]
        return new(Op.REDUCE, Shape.array(x.shape.element_type, kept), [x, init], called=[fn],
                   dimensions=tuple(dims))


def scalar_adder(module: Module, ptype: PrimitiveType) -> Computation:
    """A computation adding two scalars of `ptype` (reused across calls per module)."""
    name = f"add_{dtypes.name(ptype)}_expanded"
    for comp in module.computations:
        if comp.name == name:
            return comp
    comp = Computation(name)
    scalar = Shape.scalar(ptype)
    a = comp.add(Instruction(Op.PARAMETER, scalar, name="lhs", attrs=Attrs(parameter_number=0)))
    b = comp.add(Instruction(Op.PARAMETER, scalar, name="rhs", attrs=Attrs(parameter_number=1)))
    comp.root = comp.add(Instruction(Op.ADD, scalar, [a, b], name="sum"))
    module.add_computation(comp)
    # Callees first in the module's list (the order protos are written in).
    module.computations.remove(comp)
    module.computations.insert(0, comp)
    return comp

