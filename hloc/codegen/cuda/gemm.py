"""The tiled GEMM kernel (dots, alone or under an elementwise epilogue).

A dot's output is viewed as [batch, M, N] with M the lhs free dims, N the rhs free dims and
K the contracting dims, each group linearized row-major in logical order. A block of 16x16
threads computes a 64x64 output tile, each thread a 4x4 micro-tile (rows ty + 16i, columns
tx + 16j). The K dimension goes in steps of 16: the block stages a 64x16 lhs tile and a
16x64 rhs tile in shared memory (converted to the compute type, zero outside the matrix),
synchronizes, accumulates, and synchronizes again before the next stage. Elements are read
through the elemental generators, so any layout, element type or fused producer works.

`blas_call` describes a plain dot (no fused producer or epilogue) as one column-major
strided-batched BLAS call, which the runtime may run through cuBLAS instead of the kernel.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Instruction, Opcode, PrimitiveType
from ...thunks.gpu import BlasCall
from ...util.record import dataclass
from ..elemental.convert import convert_value
from ..elemental.indexing import clamped_starts, target_index
from ..elemental.memory import store_element, strides
from ..elemental.scalar import const
from ..elemental.types import ElemType, elem_type
from .dus import update_of
from .epilogue import find_core, store_with_core
from .kernel import KernelBuild, RootItem, dims, kernel_computation, variant
from .parts import Part, PlanContext, plans
from .reduce_common import split_index

T = 16  # threads per block side
R = 4  # micro-tile side
TILE = T * R
TK = 16
MIN_DIM = 16


@dataclass(frozen=True)
class DotShape:
    instr: Instruction
    batch: tuple[int, ...]
    m_dims: tuple[int, ...]
    n_dims: tuple[int, ...]

    @staticmethod
    def of(dot: Instruction) -> DotShape:
        dn = dot.attrs.dot_dnums
        lhs, rhs = dot.operands[0].shape, dot.operands[1].shape
        lf = tuple(d for d in range(lhs.rank) if d not in dn.lhs_batch_dimensions
                   and d not in dn.lhs_contracting_dimensions)
        rf = tuple(d for d in range(rhs.rank) if d not in dn.rhs_batch_dimensions
                   and d not in dn.rhs_contracting_dimensions)
        return DotShape(dot, tuple(dn.lhs_batch_dimensions), lf, rf)

    def size(self, side: int, dims_) -> int:
        return math.prod(self.instr.operands[side].shape.dims[d] for d in dims_)

    @property
    def b(self) -> int:
        return self.size(0, self.batch)

    @property
    def m(self) -> int:
        return self.size(0, self.m_dims)

    @property
    def n(self) -> int:
        return self.size(1, self.n_dims)

    @property
    def k(self) -> int:
        return self.size(0, self.instr.attrs.dot_dnums.lhs_contracting_dimensions)


def compute_type(dot: Instruction) -> ElemType:
    ets = [elem_type(s.shape.element_type) for s in (dot, *dot.operands)]
    if any(e.is_float and e.bits == 64 for e in ets):
        return elem_type(PrimitiveType.F64)
    if any(e.is_float for e in ets):
        return elem_type(PrimitiveType.F32)
    if all(e.kind != "int" for e in ets) and any(e.kind == "uint" for e in ets):
        return elem_type(PrimitiveType.U64)
    return elem_type(PrimitiveType.S64)


@plans(Opcode.DOT)
def plan_gemm(pc: PlanContext, k: int) -> list[Part] | None:
    dot = find_core(pc.items[k].instr)
    ds = DotShape.of(dot)
    if elem_type(dot.shape.element_type).kind == "pred" or min(ds.m, ds.n, ds.k) < MIN_DIM:
        return None
    if ds.b > pc.target.limits.max_grid_yz or -(-ds.m // TILE) > pc.target.limits.max_grid_yz:
        return None
    cet = compute_type(dot)
    size = 8 if cet.bits == 64 else 4
    launch = dims((-(-ds.n // TILE), -(-ds.m // TILE), ds.b), (T, T))
    split = splits_epilogue(pc, k, dot)
    update = update_of(pc, k)  # an in-place update of this value: the store writes it too
    items = (k,) if update is None else (k, update)
    gemm = Part("gemm.tiled", items, launch, (("core_only", 1),) if split else (),
                shared_bytes=2 * TK * TILE * size, block_threads=T * T,
                gemm=(ds.b, ds.m, ds.n, ds.k))
    if not split:
        return [gemm]
    from .loop import plan_loop

    return [gemm, plan_loop(pc, (k,), core_from_output=True)]


def splits_epilogue(pc: PlanContext, k: int, dot: Instruction) -> bool:
    """Whether a dot with an elementwise epilogue runs as the dot alone, writing the output
    buffer (a GEMM cuBLAS can run: `epilogue_blas_call`), then the epilogue in place. Only
    where the dot's values fit the output as they are (same element type) and no operand of
    the fusion shares the output's buffer (the dot would overwrite what the epilogue reads)."""
    item = pc.items[k]
    if item.instr is dot or len(item.outputs) != 1 or len(pc.items) != 1:
        return False
    out = pc.output_shapes[item.outputs[0]]
    if out.element_type != dot.shape.element_type or out.dims != dot.shape.dims:
        return False
    if not pc.output_slices or pc.overlaps_operands(item.outputs[0]):
        return False
    return _dot_blas_form(pc.instr, dot) is not None


class GemmEmitter:
    def __init__(self, kb: KernelBuild):
        self.kb = kb
        self.item = kb.items()[0]
        self.ds = DotShape.of(find_core(self.item.instr))
        self.dot = self.ds.instr
        self.cet = compute_type(self.dot)
        self.zero = const(self.cet, 0)
        size = 8 if self.cet.bits == 64 else 4
        self.a_tile = kb.nvvm.shared(self.cet.value_type, TK * TILE, size)
        self.b_tile = kb.nvvm.shared(self.cet.value_type, TK * TILE, size)

    def operand_index(self, side: int, bidx, free, kpos) -> list[ir.Value]:
        """The lhs (side 0) / rhs (side 1) index of batch `bidx`, free position, k position."""
        kb, dn = self.kb, self.dot.attrs.dot_dnums
        shape = self.dot.operands[side].shape
        batch = dn.lhs_batch_dimensions if side == 0 else dn.rhs_batch_dimensions
        contract = dn.lhs_contracting_dimensions if side == 0 else dn.rhs_contracting_dimensions
        free_dims = self.ds.m_dims if side == 0 else self.ds.n_dims
        index = {}
        batch_vals = split_index(kb, bidx, self.dot.operands[0].shape, self.ds.batch)
        for d0, d in zip(self.ds.batch, batch, strict=True):
            index[d] = batch_vals[d0]
        index.update(split_index(kb, free, shape, free_dims))
        index.update(split_index(kb, kpos, shape, contract))
        return [index.get(d, kb.i64(0)) for d in range(shape.rank)]

    def load(self, side: int, bidx, free, kpos, limit_free: int) -> ir.Value:
        """The converted element, or zero outside the matrix."""
        kb = self.kb
        b = kb.b
        inside = b.and_(b.icmp_unsigned("<", free, kb.i64(limit_free)),
                        b.icmp_unsigned("<", kpos, kb.i64(self.ds.k)))
        src = elem_type(self.dot.operands[side].shape.element_type)
        gen = kb.gen(self.dot.operands[side])

        def read():
            index = self.operand_index(side, bidx, free, kpos)
            return convert_value(kb.ctx, src, self.cet, gen(index))

        return kb.ctx.select_branch(inside, read, lambda: self.zero)

    def stage(self, bidx, m0, n0, k0, tid) -> None:
        """Copy the lhs tile [m0:m0+64, k0:k0+16] and rhs tile [k0:k0+16, n0:n0+64] to shared
        memory, k-major (a_tile[k][m], b_tile[k][n])."""
        kb = self.kb
        b = kb.b
        for q in range(TILE * TK // (T * T)):
            flat = b.add(tid, kb.i64(q * T * T))
            kk, mm = b.urem(flat, kb.i64(TK)), b.udiv(flat, kb.i64(TK))
            value = self.load(0, bidx, b.add(m0, mm), b.add(k0, kk), self.ds.m)
            b.store(value, self._at(self.a_tile, kk, mm))
            nn, kk2 = b.urem(flat, kb.i64(TILE)), b.udiv(flat, kb.i64(TILE))
            value = self.load(1, bidx, b.add(n0, nn), b.add(k0, kk2), self.ds.n)
            b.store(value, self._at(self.b_tile, kk2, nn))

    def _at(self, tile, k, i) -> ir.Value:
        b = self.kb.b
        flat = b.add(b.mul(k, self.kb.i64(TILE)), i)
        return b.gep(tile, [flat], inbounds=True, source_etype=self.cet.value_type)

    def multiply(self, acc, tx, ty) -> None:
        kb = self.kb
        b = kb.b
        ty_ = self.cet.value_type
        with kb.ctx.loop(0, TK, "kk") as kk:
            a = [b.load(self._at(self.a_tile, kk, b.add(ty, kb.i64(T * i))), typ=ty_)
                 for i in range(R)]
            v = [b.load(self._at(self.b_tile, kk, b.add(tx, kb.i64(T * j))), typ=ty_)
                 for j in range(R)]
            for i in range(R):
                for j in range(R):
                    slot = acc[i][j]
                    b.store(self._madd(b.load(slot, typ=ty_), a[i], v[j]), slot)

    def _madd(self, s, x, y):
        b = self.kb.b
        if self.cet.is_float:
            return b.fadd(s, b.fmul(x, y))
        return b.add(s, b.mul(x, y))

    def store(self, acc, bidx, m0, n0, tx, ty) -> None:
        kb = self.kb
        b = kb.b
        out_et = elem_type(self.dot.shape.element_type)
        batch = split_index(kb, bidx, self.dot.operands[0].shape, self.ds.batch)
        updates = [UpdateStore(kb, u, self.item) for u in kb.items()[1:]]
        for i in range(R):
            for j in range(R):
                m = b.add(m0, b.add(ty, kb.i64(T * i)))
                n = b.add(n0, b.add(tx, kb.i64(T * j)))
                inside = b.and_(b.icmp_unsigned("<", m, kb.i64(self.ds.m)),
                                b.icmp_unsigned("<", n, kb.i64(self.ds.n)))
                with b.if_then(inside):
                    mi = split_index(kb, m, self.dot.operands[0].shape, self.ds.m_dims)
                    ni = split_index(kb, n, self.dot.operands[1].shape, self.ds.n_dims)
                    index = ([batch[d] for d in self.ds.batch] + [mi[d] for d in self.ds.m_dims]
                             + [ni[d] for d in self.ds.n_dims])
                    value = b.load(acc[i][j], typ=self.cet.value_type)
                    value = convert_value(kb.ctx, self.cet, out_et, value)
                    if kb.recipe.param("core_only", 0):  # the epilogue is a kernel of its own
                        (k,) = self.item.outputs
                        store_element(kb.ctx, kb.output_shapes[k], kb.outputs[k], index, value)
                    else:
                        stored = store_with_core(kb, self.item, self.dot, index, [value])
                        for u in updates:
                            u.store(index, stored[0])


class UpdateStore:
    """An in-place dynamic-update-slice of the GEMM's value (update-fusion): each element the
    GEMM stores also goes to its place in the updated buffer."""

    def __init__(self, kb: KernelBuild, update: RootItem, item: RootItem):
        self.kb, self.dus, self.item = kb, update.instr, item.instr
        (self.out,) = update.outputs
        shape = kb.output_shapes[self.out]
        self.starts = clamped_starts(kb.ctx, self.dus, [kb.gen(o) for o in self.dus.operands[2:]],
                                     shape.dims, self.dus.operands[1].shape.dims)

    def store(self, index, value) -> None:
        b = self.kb.b
        at = target_index(self.kb.ctx, self.dus.operands[1], self.item, list(index))
        dest = [b.add(s, i) for s, i in zip(self.starts, at, strict=True)]
        store_element(self.kb.ctx, self.kb.output_shapes[self.out], self.kb.outputs[self.out],
                      dest, value)


@variant("gemm.tiled")
def emit_gemm(kb: KernelBuild) -> None:
    g = GemmEmitter(kb)
    b = kb.b
    tx, ty = kb.tid("x"), kb.tid("y")
    tid = b.add(tx, b.mul(ty, kb.i64(T)))
    n0 = b.mul(kb.ctaid("x"), kb.i64(TILE))
    m0 = b.mul(kb.ctaid("y"), kb.i64(TILE))
    bidx = kb.ctaid("z")
    acc = [[kb.ctx.alloca(g.cet.value_type) for _ in range(R)] for _ in range(R)]
    for row in acc:
        for slot in row:
            b.store(g.zero, slot)
    with kb.ctx.loop(0, g.ds.k, "k0", step=TK) as k0:
        g.stage(bidx, m0, n0, k0, tid)
        kb.nvvm.barrier()
        g.multiply(acc, tx, ty)
        kb.nvvm.barrier()
    g.store(acc, bidx, m0, n0, tx, ty)


# ---- the cuBLAS form of a plain dot (thunks.gpu.BlasCall) -----------------------------------------

# Element types a BLAS call takes (same type for both operands) -> the accumulation type.
BLAS_COMPUTE = {"f32": "f32", "f64": "f64", "f16": "f32", "bf16": "f32"}
_INT_MAX = 2**31 - 1  # cuBLAS sizes and leading dimensions are C ints


class _NoBlas(Exception):
    """The dot's layouts have no strided column-major form."""


def _group_stride(dims_, steps, group) -> int | None:
    """The element stride of dims `group` linearized row-major (as DotShape does), given each
    dim's size and element stride, or None when the group has one element (any stride works).
    The dims must form one evenly strided run in memory."""
    big = [d for d in group if dims_[d] > 1]
    if not big:
        return None
    expected = steps[big[-1]]
    for d in reversed(big):
        if steps[d] != expected:
            raise _NoBlas
        expected *= dims_[d]
    return steps[big[-1]]


def parameter_strides(node: Instruction, instr: Instruction) -> tuple[int, list[int]] | None:
    """(parameter number, element stride of each dim) of an operand (of a dot or convolution
    in `instr`'s kernel computation) that is a parameter or transposes of one: a transpose
    only permutes strides, so a library reads it in place. None for anything else."""
    perms = []
    while node.opcode == Opcode.TRANSPOSE:
        perms.append(node.dimensions)
        node = node.operands[0]
    if node.opcode != Opcode.PARAMETER:
        return None
    number = node.attrs.parameter_number
    steps = strides(instr.operands[number].shape)
    for perm in reversed(perms):
        steps = [steps[d] for d in perm]
    return number, steps


def _operand_strides(node: Instruction, instr: Instruction) -> tuple[int, list[int]]:
    found = parameter_strides(node, instr)
    if found is None:
        raise _NoBlas
    return found


def _matrix(rows: int, cols: int, row_stride, col_stride) -> tuple[str, int]:
    """(op, leading dimension) of a rows x cols matrix with these element strides."""
    if row_stride in (None, 1) and (col_stride is None or col_stride >= rows):
        return "N", col_stride if col_stride is not None else rows
    if col_stride in (None, 1) and (row_stride is None or row_stride >= cols):
        return "T", row_stride if row_stride is not None else cols
    raise _NoBlas


def _blas_types(lhs, rhs, out) -> str | None:
    """The compute type of a dot BLAS can run, or None."""
    a, b, c = (s.shape.dtype.name for s in (lhs, rhs, out))
    compute = BLAS_COMPUTE.get(a)
    if compute is None or b != a or c not in (a, compute):
        return None
    return compute


def blas_call(instr: Instruction, operand_slices, output_slices,
              dot: Instruction | None = None) -> BlasCall | None:
    """The cuBLAS form of a Gemm thunk's instruction when it is a plain dot of parameters
    (or of transposed parameters) with no fused epilogue, else None. With `dot`: the form of
    that dot (the core of an epilogue split off by `splits_epilogue`), writing the output."""
    dot = dot if dot is not None else kernel_computation(instr).root
    if dot.opcode != Opcode.DOT:
        return None
    if len(operand_slices) != len(instr.operands) or len(output_slices) != 1:
        return None  # tuple-shaped operands or results
    found = _dot_blas_form(instr, dot)
    if found is None:
        return None
    compute, lhs_p, rhs_p, form = found
    lhs_op, rhs_op = dot.operands
    # The call's A is the HLO rhs when it computes out^T = rhs^T lhs^T ("swapped").
    first, second = (1, 0) if form["swapped"] else (0, 1)
    slices, names = (operand_slices[lhs_p], operand_slices[rhs_p]), [
        o.shape.dtype.name for o in dot.operands]
    call = BlasCall(slices[first], slices[second], output_slices[0], a_type=names[first],
                    b_type=names[second], c_type=dot.shape.dtype.name, compute=compute, **form)
    too_big = (call.m, call.n, call.k, call.lda, call.ldb, call.ldc, call.batch)
    return call if max(too_big) <= _INT_MAX else None


def _dot_blas_form(instr: Instruction, dot: Instruction):
    """(compute type, lhs parameter, rhs parameter, _strided_call's form) of `dot` in the
    kernel computation of `instr` writing `instr`'s output, or None."""
    lhs_op, rhs_op = dot.operands
    compute = _blas_types(lhs_op, rhs_op, dot)
    if compute is None:
        return None
    try:
        (lhs_p, lhs), (rhs_p, rhs) = (_operand_strides(o, instr) for o in dot.operands)
        form = _strided_call(DotShape.of(dot), lhs, rhs, strides(instr.shape))
    except _NoBlas:
        return None
    return compute, lhs_p, rhs_p, form


def _strided_call(ds: DotShape, lhs: list[int], rhs: list[int], out: list[int]) -> dict:
    """BlasCall's sizes, ops, leading dimensions and batch strides from the element strides
    of every dim of lhs, rhs and the output (raises _NoBlas)."""
    dn = ds.instr.attrs.dot_dnums
    lhs_dims, rhs_dims = (o.shape.dims for o in ds.instr.operands)
    nb, nm, rank = len(ds.batch), len(ds.m_dims), ds.instr.shape.rank
    lb, lm, lk = (_group_stride(lhs_dims, lhs, g) for g in (
        ds.batch, ds.m_dims, dn.lhs_contracting_dimensions))
    rb, rn, rk = (_group_stride(rhs_dims, rhs, g) for g in (
        dn.rhs_batch_dimensions, ds.n_dims, dn.rhs_contracting_dimensions))
    ob, om, on = (_group_stride(ds.instr.shape.dims, out, g) for g in (
        range(nb), range(nb, nb + nm), range(nb + nm, rank)))
    m, n, k = ds.m, ds.n, ds.k
    if on in (None, 1) and (om is None or om >= n):
        # Row-major output: C^T (n x m) = rhs^T (n x k) @ lhs^T (k x m).
        (ta, lda), (tb, ldb) = _matrix(n, k, rn, rk), _matrix(k, m, lk, lm)
        sizes = dict(m=n, n=m, ldc=om if om is not None else n, swapped=True)
        batch_strides = dict(stride_a=rb or 0, stride_b=lb or 0)
    elif om in (None, 1) and (on is None or on >= m):
        (ta, lda), (tb, ldb) = _matrix(m, k, lm, lk), _matrix(k, n, rk, rn)
        sizes = dict(m=m, n=n, ldc=on if on is not None else m, swapped=False)
        batch_strides = dict(stride_a=lb or 0, stride_b=rb or 0)
    else:
        raise _NoBlas
    return dict(transa=ta, transb=tb, k=k, lda=lda, ldb=ldb, batch=ds.b, stride_c=ob or 0,
                **sizes, **batch_strides)
