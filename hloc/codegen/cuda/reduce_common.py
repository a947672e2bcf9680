"""Pieces shared by the reduction kernels: partial results with a validity flag, warp
reductions through shuffles, and shared-memory arrays of partials.

A partial is (values, valid): a thread that saw no element holds an invalid partial, so the
init value is applied exactly once (at the end), whatever it is — XLA allows any init value,
not only the reducer's identity. The reducer must be associative and commutative (XLA's rule
for reduce), which is what lets threads combine their partials in tree order.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Instruction, Shape
from ...util.record import dataclass
from ..elemental.complex import ir as complex_ir
from ..elemental.indexing import delinearize
from ..elemental.memory import major_to_minor
from ..elemental.reduction import Reducer
from ..elemental.types import I1, I8, I32, ElemType, elem_type, type_bytes
from .kernel import KernelBuild


@dataclass(frozen=True)
class ReduceShape:
    """A reduce's input split into kept (output) and reduced dimensions."""

    instr: Instruction
    n: int  # number of inputs (variadic reduce)
    in_shape: Shape
    reduced: tuple[int, ...]  # reduced dims, major to minor in memory
    kept: tuple[int, ...]  # kept dims in logical order (= output dims)
    kept_memory: tuple[int, ...]  # kept dims, major to minor in memory

    @staticmethod
    def of(instr: Instruction) -> ReduceShape:
        n = len(instr.operands) // 2
        shape = instr.operands[0].shape
        dims = set(instr.dimensions)
        order = major_to_minor(shape)
        return ReduceShape(instr, n, shape, tuple(d for d in order if d in dims),
                           tuple(d for d in range(shape.rank) if d not in dims),
                           tuple(d for d in order if d not in dims))

    @property
    def row_length(self) -> int:
        return math.prod(self.in_shape.dims[d] for d in self.reduced)

    @property
    def rows(self) -> int:
        return math.prod(self.in_shape.dims[d] for d in self.kept)

    @property
    def minor_reduced(self) -> bool:
        """Whether the contiguous input dimension is reduced (a row reduction)."""
        order = major_to_minor(self.in_shape)
        return bool(order) and order[-1] in self.reduced

    def element_types(self) -> list[ElemType]:
        return [elem_type(o.shape.element_type, complex_ok=True) for o in self.instr.operands[:self.n]]


def split_index(kb: KernelBuild, linear: ir.Value, shape: Shape, dims) -> dict[int, ir.Value]:
    """Values of `dims` (major to minor) for position `linear` in their row-major space."""
    return dict(zip(dims, delinearize(kb.b, linear, [shape.dims[d] for d in dims]), strict=True))


@dataclass
class Partial:
    values: list[ir.Value]
    valid: ir.Value


class PartialOps:
    """Combining partials of one reduce inside a kernel."""

    def __init__(self, kb: KernelBuild, rs: ReduceShape):
        self.kb, self.rs = kb, rs
        self.ets = rs.element_types()
        self.reducer = Reducer(kb.ctx, rs.instr.called[0], self.ets)
        self.inputs = [kb.gen(o) for o in rs.instr.operands[:rs.n]]
        self.inits = [kb.gen(o) for o in rs.instr.operands[rs.n:]]

    def init_values(self) -> list[ir.Value]:
        return self.reducer.start([g([]) for g in self.inits])

    def empty(self) -> Partial:
        return Partial(self.init_values(), ir.Constant(I1, 0))

    def read(self, index: list[ir.Value]) -> list[ir.Value]:
        return [g(list(index)) for g in self.inputs]

    def add_element(self, p: Partial, values: list[ir.Value]) -> Partial:
        """p combined with one element (valid by construction)."""
        b = self.kb.b
        combined = self.reducer.combine(p.values, values)
        out = [b.select(p.valid, c, v) for c, v in zip(combined, values, strict=True)]
        return Partial(out, ir.Constant(I1, 1))

    def combine(self, a: Partial, c: Partial) -> Partial:
        b = self.kb.b
        both = b.and_(a.valid, c.valid)
        merged = self.reducer.combine(a.values, c.values)
        out = [b.select(both, m, b.select(c.valid, y, x))
               for m, x, y in zip(merged, a.values, c.values, strict=True)]
        return Partial(out, b.or_(a.valid, c.valid))

    def finish(self, p: Partial) -> list[ir.Value]:
        """init (op) partial if valid, else init; rounded to the output types."""
        b = self.kb.b
        init = self.init_values()
        merged = self.reducer.combine(init, p.values)
        values = [b.select(p.valid, m, i) for m, i in zip(merged, init, strict=True)]
        return self.reducer.finish(values)

    def warp_reduce(self, p: Partial) -> Partial:
        """Lane 0 ends with the combination of the 32 lanes' partials."""
        nv = self.kb.nvvm
        for delta in (16, 8, 4, 2, 1):
            other = Partial([shuffle_down(self.kb, v, delta) for v in p.values],
                            nv.shuffle("down", p.valid, delta))
            p = self.combine(p, other)
        return p


def accumulate_strided(kb: KernelBuild, ops: PartialOps, rs: ReduceShape, kept_index: dict,
                       start: ir.Value, step: int) -> Partial:
    """The partial of the row at `kept_index` (kept dim -> value) over the reduced positions
    start, start + step, ... (none when start >= the row length)."""
    b, ctx = kb.b, kb.ctx
    empty = ops.empty()
    slots = [ctx.alloca(v.type) for v in empty.values]
    flag = ctx.alloca(ir.IntType(1))
    for s, v in zip(slots, empty.values, strict=True):
        b.store(v, s)
    b.store(empty.valid, flag)

    def load() -> Partial:
        return Partial([b.load(s, typ=v.type) for s, v in zip(slots, empty.values, strict=True)],
                       b.load(flag, typ=ir.IntType(1)))

    with ctx.loop(start, kb.i64(rs.row_length), "r", step=step) as r:
        index = dict(kept_index)
        index.update(split_index(kb, r, rs.in_shape, rs.reduced))
        new = ops.add_element(load(), ops.read([index[d] for d in range(rs.in_shape.rank)]))
        for s, v in zip(slots, new.values, strict=True):
            b.store(v, s)
        b.store(new.valid, flag)
    return load()


def shuffle_down(kb: KernelBuild, value: ir.Value, delta: int) -> ir.Value:
    """A warp shuffle of a scalar or of a complex {re, im} struct (part by part)."""
    if not isinstance(value.type, ir.LiteralStructType):
        return kb.nvvm.shuffle("down", value, delta)
    moved = [kb.nvvm.shuffle("down", part, delta) for part in complex_ir.parts(kb.b, value)]
    return complex_ir.pair(kb.b, value.type, *moved)


class SharedPartials:
    """A shared-memory array of `count` partials (values stored in register form)."""

    def __init__(self, kb: KernelBuild, ops: PartialOps, count: int):
        self.kb = kb
        self.types = [v.type for v in ops.init_values()]
        self.arrays = [kb.nvvm.shared(_store_type(t), count, type_bytes(t)) for t in self.types]
        self.flags = kb.nvvm.shared(I8, count, 1)

    def store(self, slot: ir.Value, p: Partial) -> None:
        b = self.kb.b
        for arr, t, v in zip(self.arrays, self.types, p.values, strict=True):
            st = _store_type(t)
            b.store(b.zext(v, st) if t == I1 else v, b.gep(arr, [slot], source_etype=st))
        b.store(b.zext(p.valid, I8), b.gep(self.flags, [slot], source_etype=I8))

    def load(self, slot: ir.Value) -> Partial:
        b = self.kb.b
        values = []
        for arr, t in zip(self.arrays, self.types, strict=True):
            st = _store_type(t)
            raw = b.load(b.gep(arr, [slot], source_etype=st), typ=st)
            values.append(b.trunc(raw, I1) if t == I1 else raw)
        flag = b.load(b.gep(self.flags, [slot], source_etype=I8), typ=I8)
        return Partial(values, b.trunc(flag, I1))


def _store_type(t: ir.Type) -> ir.Type:
    return I8 if t == I1 else t




def shared_partial_bytes(rs: ReduceShape, count: int) -> int:
    """Shared memory the SharedPartials of `rs` take (for planning)."""
    total = 0
    for et in rs.element_types():
        t = et.value_type
        total = -(-total // 16) * 16 + count * type_bytes(t)
    return -(-total // 16) * 16 + count


__all__ = ["I32", "Partial", "PartialOps", "ReduceShape", "SharedPartials", "split_index",
           "shared_partial_bytes"]
