"""Small dots as native loops: register tiles vectorized over the output's last dimension.

XLA:CPU emits small dots inline as tiled LLVM loops instead of calling a GEMM library; so does
this module, for dots of at most SMALL_DOT_WORK multiply-adds:
  - a Gemm thunk of that size gets a native kernel (thunk_kernels.NATIVE_KINDS "gemm"), so a
    loop around it can run in a native driver instead of calling BLAS from Python;
  - a fusion whose contractions are all such dots is one kernel (outline.py does not split it).

A dot is computed in *tiles* of R rows (positions of its last lhs-free dimension) by C columns
(positions of its last rhs-free dimension): R vector accumulators of C lanes stay in registers
while the contracting dimensions are swept; each step multiplies one C-wide row of rhs by R
lhs values (fmuladd). Operand values come from the elemental generators, so transposed
operands, batch dimensions and fused producers need nothing special. Narrow floats accumulate
in f32 and integers in the output type, at least 32 bits wide (wrap-around, as XLA); 8- and
signed 16-bit integer products accumulated in 32 bits go two contracting steps at a time on
x86 (pmaddwd, `paired`), an int8 GEMM's inner loop.

Where the dot's value is only written out (a Gemm thunk, a fusion rooted at the dot), the
tiles are the kernel's work units (DotSegment) and store straight into the output. A dot read
inside a fused computation (by its epilogue) is computed whole into a stack buffer where its
generator is built -- the start of the kernel body -- and the epilogue reads the buffer.
"""

from __future__ import annotations

import contextlib
import math

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode, PrimitiveType, Shape
from ...util.record import dataclass
from ..elemental.convert import convert_value
from ..elemental.indexing import delinearize
from ..elemental.memory import (
    element_pointer,
    linear_offset,
    major_to_minor,
    row_major,
    store_element,
    strides,
)
from ..elemental.registry import emits, generic_lowering
from ..elemental.scalar import contractible
from ..elemental.types import I32, ElemType, elem_type
from .driver import DRIVER_MAX_WORK
from .kernel import KernelBuild, RootItem, Segment, special_segment
from .kernel_spec import KernelSpec

# Dots of fewer multiply-adds (batch * m * n * k) are native loops. Measured against the
# runtime's BLAS / AVX-512 GEMM path (2 cores, f32 and f64, plain, transposed and batched):
# about twice as fast up to this size, call overhead included; a kernel of this much work is
# the first the runtime splits across threads (and keeps out of native drivers), where the
# library's packed, threaded GEMM wins.
SMALL_DOT_WORK = DRIVER_MAX_WORK
# Largest stack buffer for a dot computed ahead of its epilogue.
MAX_BUFFER_BYTES = 1 << 18
# Tiles are sized for 256-bit vectors (a 512-bit target simply uses fewer, wider registers)
# with at most ACCUMULATORS vector accumulators and MAX_ROWS rows.
VECTOR_BITS = 256
ACCUMULATORS = 12
MAX_ROWS = 8
# The budget of a tile whose products go in pairs (TileEmitter._pair_widths), in 256-bit
# vectors: twelve zmm registers on AVX-512; an AVX2 target computes its columns in passes.
PAIR_ACCUMULATORS = 2 * ACCUMULATORS


@dataclass(frozen=True)
class DotForm:
    """A dot's dimension roles. Output dims: batch, then lhs-free, then rhs-free (HLO order)."""

    lhs: Shape
    rhs: Shape
    out: Shape
    lb: tuple[int, ...]
    rb: tuple[int, ...]
    lc: tuple[int, ...]
    rc: tuple[int, ...]
    lf: tuple[int, ...]
    rf: tuple[int, ...]

    @staticmethod
    def of(instr: Instruction) -> DotForm:
        dn = instr.attrs.dot_dnums
        lhs, rhs = instr.operands[0].shape, instr.operands[1].shape
        lb, lc = tuple(dn.lhs_batch_dimensions), tuple(dn.lhs_contracting_dimensions)
        rb, rc = tuple(dn.rhs_batch_dimensions), tuple(dn.rhs_contracting_dimensions)
        lf = tuple(d for d in range(lhs.rank) if d not in lb and d not in lc)
        rf = tuple(d for d in range(rhs.rank) if d not in rb and d not in rc)
        return DotForm(lhs, rhs, instr.shape, lb, rb, lc, rc, lf, rf)

    @property
    def row_dim(self) -> int | None:
        """The output dimension tiles span R positions of (the last lhs-free one)."""
        return len(self.lb) + len(self.lf) - 1 if self.lf else None

    @property
    def col_dim(self) -> int | None:
        """The output dimension the accumulators are vectorized over (the last rhs-free one)."""
        return self.out.rank - 1 if self.rf else None

    def size(self, dim: int | None) -> int:
        return 1 if dim is None else self.out.dims[dim]

    @property
    def outer_dims(self) -> list[int]:
        return [d for d in range(self.out.rank) if d not in (self.row_dim, self.col_dim)]

    @property
    def depth(self) -> int:
        return math.prod(self.lhs.dims[d] for d in self.lc)

    def operand_indices(self, out_index: list, ivs: list) -> tuple[list, list]:
        """lhs and rhs indices of output position `out_index` at contracting position `ivs`."""
        li: list = [None] * self.lhs.rank
        ri: list = [None] * self.rhs.rank
        pos = iter(out_index)
        for dl, dr in zip(self.lb, self.rb, strict=True):
            li[dl] = ri[dr] = next(pos)
        for d in self.lf:
            li[d] = next(pos)
        for d in self.rf:
            ri[d] = next(pos)
        for dl, dr, v in zip(self.lc, self.rc, ivs, strict=True):
            li[dl] = ri[dr] = v
        return li, ri


# ---- policy -----------------------------------------------------------------------------------

def compute_type(instr: Instruction) -> ElemType:
    """The accumulator type: f64 if any float is f64, f32 for other floats (narrow ones
    included); for integer results the output type, widened to 32 bits (the low bits of a
    wrapping sum do not depend on the width). UnsupportedError for pred/complex results."""
    out = elem_type(instr.shape.element_type)
    if out.kind == "pred":
        raise UnsupportedError(f"%{instr.name}: pred dot has no tiled form")
    floats = [e for e in (elem_type(o.shape.element_type) for o in instr.operands) if e.is_float]
    floats += [out] if out.is_float else []
    if any(e.bits == 64 for e in floats):
        return elem_type(PrimitiveType.F64)
    if floats:
        return elem_type(PrimitiveType.F32)
    return out if out.bits >= 32 else elem_type(PrimitiveType.S32)


def tiled(instr: Instruction) -> bool:
    """Whether the dot has a tiled form (array operands, supported element types)."""
    if instr.opcode != Opcode.DOT or not all(o.shape.is_array for o in instr.operands):
        return False
    try:
        compute_type(instr)
    except UnsupportedError:
        return False
    return True


def dot_work(instr: Instruction) -> int:
    """Multiply-adds of a dot (every output element counts at least once)."""
    return instr.shape.num_elements * max(1, DotForm.of(instr).depth)


def small_dot(instr: Instruction) -> bool:
    return tiled(instr) and dot_work(instr) < SMALL_DOT_WORK


# Element types the runtime's GEMM (BLAS, or its own AVX-512 kernel) computes, when operands
# and result share one of them (runtime/cpu/contract.blas_dtype).
LIBRARY_TYPES = frozenset({PrimitiveType.F32, PrimitiveType.F64, PrimitiveType.C64,
                           PrimitiveType.C128})


# Operand types the native GEMM multiplies into another result type (runtime/cpu/gemm.py):
# bf16 products in f32 (see bf16-dot-operands), int8 ones in int32 (quantized matmuls).
MIXED_LIBRARY_TYPES = {PrimitiveType.BF16: PrimitiveType.F32, PrimitiveType.S8: PrimitiveType.S32}


def library_dot(instr: Instruction) -> bool:
    """Whether the runtime's GEMM computes this dot: one of LIBRARY_TYPES throughout, or
    operands and result of MIXED_LIBRARY_TYPES."""
    operands = {o.shape.element_type for o in instr.operands}
    if len(operands) == 1 and MIXED_LIBRARY_TYPES.get(next(iter(operands))) == \
            instr.shape.element_type:
        return True
    types = operands | {instr.shape.element_type}
    return len(types) == 1 and types <= LIBRARY_TYPES


# A batched dot whose products are each at most this many multiply-adds is a kernel
# whatever its batch: the library computes it as that many tiny products, one call each.
SMALL_BATCHED_PRODUCT = 1 << 12


# Products with at most this many result columns (rhs-free positions), read from rhs rows
# that are contiguous, are tiled kernels whatever their size. Packing the operands for the
# library's GEMM pays off over many columns; over few, the tiles (which read lhs in place and
# keep each rhs row in one or two vectors) were faster at every size measured, 1M to 1G
# multiply-adds, f32 and f64, AVX-512 and x86-64-v3 (2 Zen 4 cores, minimum times): 8192 x 16
# x 8 0.40 of the GEMM's time, 65536 x 64 x 64 0.61, 2048 x 256 x 128 0.84, 16384 x 1024 x 64
# 0.86-0.88; at 256 columns (1024 x 256 x 256) 0.86-1.17.
NARROW_COLUMNS = 128


def narrow_product(instr: Instruction) -> bool:
    """A product with at most NARROW_COLUMNS columns whose rhs rows are contiguous."""
    form = DotForm.of(instr)
    if not form.rf or major_to_minor(form.rhs)[-1] != form.rf[-1]:
        return False
    return math.prod(form.rhs.dims[d] for d in form.rf) <= NARROW_COLUMNS


def kernel_gemm(instr: Instruction) -> bool:
    """A Gemm thunk computed by a tiled kernel: a small dot; a narrow product
    (`narrow_product`); a batch of small products (512 matrix-vector products of 32 x 16 took
    0.66 ms in the library, one call each); or one no GEMM library takes (integers other than
    int8 into int32, other mixed types), whatever its size: the runtime's other path for those
    is the reference interpreter."""
    if not tiled(instr):
        return False
    work, lhs = dot_work(instr), instr.operands[0].shape
    batch = math.prod(lhs.dims[d] for d in instr.attrs.dot_dnums.lhs_batch_dimensions)
    return (work < SMALL_DOT_WORK or not library_dot(instr) or narrow_product(instr)
            or (batch > 1 and work // batch <= SMALL_BATCHED_PRODUCT))


def written_out(instr: Instruction) -> bool:
    """Whether the dot's value is only a kernel output (the root or in the root tuple)."""
    users = list(instr.users)
    return instr.is_root or (bool(users) and all(u.opcode == Opcode.TUPLE and u.is_root
                                                 for u in users))


def _buffer_bytes(instr: Instruction) -> int:
    return instr.shape.num_elements * compute_type(instr).bits // 8


def buffered(instr: Instruction) -> bool:
    """A small dot read inside its computation: computed ahead into a stack buffer."""
    return small_dot(instr) and not written_out(instr) and _buffer_bytes(instr) <= MAX_BUFFER_BYTES


def inline_dot(instr: Instruction) -> bool:
    """Whether a dot inside a fusion can be computed by the fused kernel itself."""
    return small_dot(instr) and (written_out(instr) or buffered(instr))


# ---- tiles ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tiling:
    """Tiles of `rows` x `cols` output positions; units are (outer position, row block, column
    block), column blocks fastest."""

    rows: int
    cols: int
    m: int  # positions of the row dimension (1 without one)
    n: int  # positions of the column dimension
    outer: tuple[int, ...]  # sizes of the other output dimensions

    @staticmethod
    def of(form: DotForm, cet: ElemType, accumulators: int = ACCUMULATORS) -> Tiling:
        m, n = form.size(form.row_dim), form.size(form.col_dim)
        lanes = max(1, VECTOR_BITS // cet.bits)
        outer = tuple(form.out.dims[d] for d in form.outer_dims)
        if m == 0 or n == 0:
            return Tiling(1, 1, m, n, outer)
        rows, vectors = min(_shapes(m, n, lanes, accumulators),
                            key=lambda rv: _cost(m, n, form.depth, lanes, *rv))
        return Tiling(rows, min(n, vectors * lanes), m, n, outer)

    @property
    def row_blocks(self) -> int:
        return -(-self.m // self.rows)

    @property
    def col_blocks(self) -> int:
        return -(-self.n // self.cols)

    @property
    def extent(self) -> int:
        return math.prod(self.outer) * self.row_blocks * self.col_blocks


def paired(instr: Instruction) -> bool:
    """Whether the dot's products go two contracting steps at a time (x86's pmaddwd, or
    vpdpwssd where LLVM has VNNI): 8-bit and signed 16-bit integer operands accumulated in
    32 bits (an int8 product accumulated in int32). pmaddwd multiplies 16-bit pairs and adds
    each pair's two products into a 32-bit lane, which cannot overflow for such operands; the
    accumulator then adds them: the wrapping sum of the one-by-one form, in half the
    multiplies and adds."""
    form = DotForm.of(instr)
    cet = compute_type(instr)
    if cet.is_float or cet.bits != 32 or not form.lc or form.lhs.dims[form.lc[-1]] < 2:
        return False
    for o in instr.operands:
        et = elem_type(o.shape.element_type)
        if et.is_float or et.kind == "pred" or et.bits > 16 or (et.bits == 16 and not et.is_signed):
            return False
    return True


def tiling_of(instr: Instruction) -> Tiling:
    """The dot's tiles: twice the accumulators where its products go in pairs (a pair step
    costs a conversion per row and per column chunk besides its multiply-adds, which wider
    tiles amortize: an int8 512 x 1024 x 1024 product 5.2 -> 4.2 ms on AVX-512)."""
    budget = PAIR_ACCUMULATORS if paired(instr) else ACCUMULATORS
    return Tiling.of(DotForm.of(instr), compute_type(instr), budget)


def _shapes(m: int, n: int, lanes: int, accumulators: int):
    """Candidate (rows, vectors per row) of a tile within the accumulator budget."""
    for rows in range(1, min(MAX_ROWS, m) + 1):
        vectors = min(-(-n // lanes), max(1, accumulators // rows))
        yield rows, vectors


def _cost(m: int, n: int, depth: int, lanes: int, rows: int, vectors: int) -> float:
    """Rough cycles: per contracting step a tile issues rows * vectors FMAs and rows + vectors
    loads (two of each per cycle), and waits at least an FMA latency (4) on each chain; per
    tile add its setup and stores."""
    cols = min(n, vectors * lanes)
    tiles = -(-m // rows) * -(-n // cols)
    step = max(rows * vectors / 2, (rows + vectors) / 2, 4)
    return tiles * (max(depth, 1) * step + rows * vectors + 8)


class TileEmitter:
    """Emits the tiles of one dot from its operand generators."""

    def __init__(self, ctx, instr: Instruction, lhs_gen, rhs_gen):
        self.ctx = ctx
        self.instr = instr
        self.form = DotForm.of(instr)
        self.cet = compute_type(instr)
        self.l_et = elem_type(self.form.lhs.element_type)
        self.r_et = elem_type(self.form.rhs.element_type)
        self.tiling = tiling_of(instr)
        self.lhs_gen, self.rhs_gen = lhs_gen, rhs_gen
        target = ctx.target
        self.lanes = target.lanes(self.cet.bits) if hasattr(target, "lanes") else \
            max(1, VECTOR_BITS // self.cet.bits)
        self.registers = getattr(target, "vector_registers", 32)
        self.along_k = self._along_k()
        self.pair_widths = () if self.along_k else self._pair_widths()

    def _along_k(self) -> bool:
        """Whether each output is a dot product of two contiguous runs (a matrix-vector
        product: one column, the last contracting dimension unit-stride in both operands in
        memory): tiles then hold vectors along the contracting dimension instead of along the
        columns, where a single column left every lane but one idle. The sum's order becomes
        lane-partitioned (as XLA's matrix-vector emitter and every BLAS), not sequential."""
        form, t = self.form, self.tiling
        if t.n != 1 or not form.lc or not self.cet.is_float or \
                self.l_et != self.cet or self.r_et != self.cet:
            return False
        if not (hasattr(self.lhs_gen, "run") and hasattr(self.rhs_gen, "run")):
            return False
        lhs_k, rhs_k = form.lc[-1], form.rc[-1]
        return (form.lhs.dims[lhs_k] >= 2 * self.lanes
                and strides(self.lhs_gen.shape)[lhs_k] == 1
                and strides(self.rhs_gen.shape)[rhs_k] == 1)

    def _pair_widths(self) -> tuple[int, ...]:
        """The accumulator widths x86's pmaddwd computes where this dot's products go in pairs
        (`paired`); empty where they go one by one."""
        target = self.ctx.target
        if not paired(self.instr) or not getattr(target, "is_x86", False):
            return ()
        widths = [4]  # SSE2: every x86-64
        if target.has("avx2"):
            widths.append(8)
        if target.has("avx512bw"):
            widths.append(16)
        widths = [w for w in widths if w <= max(4, self.lanes)]
        # A chunk holds `lanes` columns; without a pmaddwd that wide (AVX-512F without BW),
        # the products go one by one.
        return tuple(widths) if widths[-1] >= self.lanes else ()

    def emit(self, lo: ir.Value, hi: ir.Value, store, store_run=None, *,
             overlap: bool = False) -> None:
        """Tiles [lo, hi); store(output index, accumulator value) writes each element, or
        `store_run(output index, vector)` the consecutive columns of one accumulator vector
        starting there, if given (for outputs whose columns are contiguous).

        `overlap`: a last row or column block that the dot's size leaves short is a whole
        tile moved back to end at the last row or column, so it computes again some of the
        block before it (the same values) instead of being a second, smaller copy of the
        contracting loop: half the code where both blocks fall short. Only for a buffer the
        kernel alone writes and reads back after all tiles (`dot`'s stack buffer): an output
        may share memory with an operand, or be written by another thread's tiles."""
        with self.ctx.loop(lo, hi, "tile") as unit:
            index, i0, j0 = self._origin(unit)
            t = self.tiling
            if overlap:
                i0, j0 = self._clamp(i0, t.rows, t.m), self._clamp(j0, t.cols, t.n)
                self._tile(index, i0, j0, t.rows, t.cols, store, store_run)
            else:
                self._split(i0, t.rows, t.m, lambda rows: self._split(
                    j0, t.cols, t.n, lambda cols: self._tile(index, i0, j0, rows, cols, store,
                                                             store_run)))

    def _clamp(self, start: ir.Value, full: int, size: int) -> ir.Value:
        """`start`, or size - full where a whole tile from `start` would pass the end."""
        if size % full == 0:
            return start
        return self.ctx.call("llvm.smin.i64", [start, self.ctx.i64(size - full)])

    def _origin(self, unit: ir.Value):
        """The output index of a unit's outer dims and its first row and column."""
        ctx, b, t = self.ctx, self.ctx.builder, self.tiling
        i64 = ctx.i64
        col_block = b.urem(unit, i64(t.col_blocks)) if t.col_blocks > 1 else i64(0)
        rest = b.udiv(unit, i64(t.col_blocks)) if t.col_blocks > 1 else unit
        row_block = b.urem(rest, i64(t.row_blocks)) if t.row_blocks > 1 else i64(0)
        outer = b.udiv(rest, i64(t.row_blocks)) if t.row_blocks > 1 else rest
        index: list = [i64(0)] * self.form.out.rank
        if t.outer:
            digits = delinearize(ctx.builder, outer, list(t.outer), fold_unit_dims=False)
            for d, v in zip(self.form.outer_dims, digits, strict=True):
                index[d] = v
        return index, b.mul(row_block, i64(t.rows)), b.mul(col_block, i64(t.cols))

    def _split(self, start: ir.Value, full: int, size: int, emit) -> None:
        """emit(full) where a whole tile fits from `start`, emit(size % full) at the end."""
        tail = size % full
        if tail == 0:
            emit(full)
            return
        b = self.ctx.builder
        fits = b.icmp_signed("<=", b.add(start, self.ctx.i64(full)), self.ctx.i64(size))
        with b.if_else(fits) as (whole, rest):
            with whole:
                emit(full)
            with rest:
                emit(tail)

    def _tile(self, index: list, i0, j0, rows: int, cols: int, store, store_run) -> None:
        if self.along_k:
            self._tile_along_k(index, i0, j0, rows, store)
            return
        ctx, b = self.ctx, self.ctx.builder
        row_ids = [b.add(i0, ctx.i64(r)) for r in range(rows)]
        col_ids = [b.add(j0, ctx.i64(c)) for c in range(cols)]
        # Accumulators in vectors of the target's width (the last one may be shorter).
        chunks = [col_ids[c:c + self.lanes] for c in range(0, cols, self.lanes)]
        # A pair tile's budget counts 256-bit vectors; where the target's registers cannot
        # hold its accumulators (AVX2), its columns go in passes that fit.
        per_pass = max(1, (self.registers - 2) // (rows + 1)) if self.pair_widths else len(chunks)
        for first in range(0, len(chunks), per_pass):
            self._tile_pass(index, row_ids, chunks[first:first + per_pass], store, store_run)

    def _tile_pass(self, index: list, row_ids, chunks, store, store_run) -> None:
        """The tile's rows over `chunks` of its columns: accumulators, the contracting loop,
        the stores."""
        ctx, b, form = self.ctx, self.ctx.builder, self.form
        vecs = [ir.VectorType(self.cet.value_type, len(chunk)) for chunk in chunks]
        slots = [[ctx.alloca(vec) for vec in vecs] for _ in row_ids]
        for row in slots:
            for slot, vec in zip(row, vecs, strict=True):
                b.store(ir.Constant(vec, None), slot)
        with contextlib.ExitStack() as stack:
            if self.pair_widths:
                ivs = [stack.enter_context(ctx.loop(0, form.lhs.dims[d], "k")) for d in form.lc[:-1]]
                self._pair_steps(index, ivs, row_ids, chunks, vecs, slots)
            else:
                ivs = [stack.enter_context(ctx.loop(0, form.lhs.dims[d], "k")) for d in form.lc]
                self._step(index, ivs, row_ids, chunks, vecs, slots)
        for r, row in enumerate(slots):
            for slot, chunk, vec in zip(row, chunks, vecs, strict=True):
                acc = b.load(slot, typ=vec)
                if store_run is not None and form.col_dim is not None:
                    store_run(self._at(index, row_ids[r], chunk[0]), acc)
                    continue
                for c, col in enumerate(chunk):
                    store(self._at(index, row_ids[r], col),
                          b.extract_element(acc, ir.Constant(I32, c)))

    def _tile_along_k(self, index: list, i0, j0, rows: int, store) -> None:
        """`rows` dot products: per row a vector accumulator over lanes of the last contracting
        dimension (and a scalar one for its tail), summed in a fixed tree at the end."""
        ctx, b, form = self.ctx, self.ctx.builder, self.form
        lanes, kd = self.lanes, form.lc[-1]
        depth = form.lhs.dims[kd]
        vec = ir.VectorType(self.cet.value_type, lanes)
        row_ids = [b.add(i0, ctx.i64(r)) for r in range(rows)]
        vector_slots = [ctx.alloca(vec) for _ in range(rows)]
        tail_slots = [ctx.alloca(self.cet.value_type) for _ in range(rows)]
        for v, t in zip(vector_slots, tail_slots, strict=True):
            b.store(ir.Constant(vec, None), v)
            b.store(ir.Constant(self.cet.value_type, None), t)
        body = (depth // lanes) * lanes
        with contextlib.ExitStack() as stack:
            ivs = [stack.enter_context(ctx.loop(0, form.lhs.dims[d], "k")) for d in form.lc[:-1]]
            with ctx.loop(0, body, "kv", step=lanes) as k:
                _, ri = self.form.operand_indices(self._at(index, row_ids[0], j0), ivs + [k])
                y = self.rhs_gen.run(ri, form.rc[-1], lanes)
                for row_id, slot in zip(row_ids, vector_slots, strict=True):
                    li, _ = self.form.operand_indices(self._at(index, row_id, j0), ivs + [k])
                    x = self.lhs_gen.run(li, kd, lanes)
                    b.store(self._fma(x, y, b.load(slot, typ=vec)), slot)
            if body < depth:
                with ctx.loop(body, depth, "kt") as k:
                    _, ri = self.form.operand_indices(self._at(index, row_ids[0], j0), ivs + [k])
                    y = self.rhs_gen(ri)
                    for row_id, slot in zip(row_ids, tail_slots, strict=True):
                        li, _ = self.form.operand_indices(self._at(index, row_id, j0), ivs + [k])
                        x = self.lhs_gen(li)
                        acc = b.load(slot, typ=self.cet.value_type)
                        b.store(contractible(ctx, b.fadd(acc, contractible(ctx, b.fmul(x, y)))), slot)
        for row_id, v, t in zip(row_ids, vector_slots, tail_slots, strict=True):
            total = b.fadd(self._tree_sum(b.load(v, typ=vec)), b.load(t, typ=self.cet.value_type))
            store(self._at(index, row_id, j0), total)

    def _tree_sum(self, v: ir.Value) -> ir.Value:
        """The lanes of `v` summed pairwise (halves added until one lane is left)."""
        b = self.ctx.builder
        n = v.type.count
        while n > 1:
            half = n // 2
            lo = b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, half), list(range(half))))
            hi = b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, half), list(range(half, n))))
            v, n = b.fadd(lo, hi), half
        return b.extract_element(v, ir.Constant(I32, 0))

    def _step(self, index, ivs, row_ids, chunks, vecs, slots) -> None:
        """One contracting step of the tile, products one by one."""
        if self._by_rows(len(row_ids), len(chunks)):
            self._step_by_rows(index, ivs, row_ids, chunks, vecs, slots)
        else:
            self._step_by_chunks(index, ivs, row_ids, chunks, vecs, slots)

    def _pair_steps(self, index, ivs, row_ids, chunks, vecs, slots) -> None:
        """The last contracting dimension two steps at a time through pmaddwd (_pair_widths):
        per pair of steps, each rhs chunk's two rows interleaved as 16-bit pairs, each row's
        two lhs values as one broadcast 32-bit pair; an odd last step goes alone."""
        ctx, b = self.ctx, self.ctx.builder
        depth = self.form.lhs.dims[self.form.lc[-1]]
        s16 = elem_type(PrimitiveType.S16)
        with ctx.loop(0, depth // 2, "k2") as k2:
            k = b.mul(k2, ctx.i64(2))
            steps = (ivs + [k], ivs + [b.add(k, ctx.i64(1))])
            rhs = [self._pair_chunk(index, steps, chunk, s16) for chunk in chunks]
            for row_id, row in zip(row_ids, slots, strict=True):
                pair = self._lhs_pair(index, steps, row_id, s16)
                for slot, x, vec in zip(row, rhs, vecs, strict=True):
                    b.store(b.add(b.load(slot, typ=vec), self._pmaddwd(pair, x, vec.count)), slot)
        if depth % 2:
            self._step(index, ivs + [ctx.i64(depth - 1)], row_ids, chunks, vecs, slots)

    def _pair_width(self, count: int) -> int:
        return next((w for w in self.pair_widths if w >= count), self.pair_widths[-1])

    def _pair_chunk(self, index, steps, col_ids, s16: ElemType) -> ir.Value:
        """rhs rows k and k+1 of the chunk's columns as <2W x i16> (k's value, k+1's) pairs,
        W the pmaddwd width the chunk fits (lanes past the chunk undefined)."""
        b = self.ctx.builder
        count = len(col_ids)
        halves = [self._rhs_values(index, ivs, col_ids, s16) for ivs in steps]
        width = self._pair_width(count)
        mask = [x for c in range(count) for x in (c, count + c)] + [0, count] * (width - count)
        return b.shuffle_vector(halves[0], halves[1], ir.Constant(ir.VectorType(I32, 2 * width),
                                                                  mask))

    def _lhs_pair(self, index, steps, row, s16: ElemType) -> ir.Value:
        """The row's lhs values at k and k+1 as one i32 (k's in the low half)."""
        b = self.ctx.builder
        pair = ir.Constant(ir.VectorType(s16.value_type, 2), ir.Undefined)
        for n, ivs in enumerate(steps):
            li, _ = self.form.operand_indices(self._at(index, row, None), ivs)
            value = convert_value(self.ctx, self.l_et, s16, self.lhs_gen(li))
            pair = b.insert_element(pair, value, ir.Constant(I32, n))
        return b.bitcast(pair, I32)

    def _pmaddwd(self, pair: ir.Value, x: ir.Value, count: int) -> ir.Value:
        """<count x i32>: lane c = pair.lo * x[2c] + pair.hi * x[2c + 1]."""
        b = self.ctx.builder
        width = x.type.count // 2
        words = b.bitcast(self._splat(pair, ir.VectorType(I32, width)),
                          ir.VectorType(x.type.element, 2 * width))
        name = {4: "llvm.x86.sse2.pmadd.wd", 8: "llvm.x86.avx2.pmadd.wd",
                16: "llvm.x86.avx512.pmaddw.d.512"}[width]
        out = self.ctx.call(name, [words, x], ret=ir.VectorType(I32, width))
        if width == count:
            return out
        return b.shuffle_vector(out, ir.Constant(out.type, ir.Undefined),
                                ir.Constant(ir.VectorType(I32, count), list(range(count))))

    def _by_rows(self, rows: int, chunks: int) -> bool:
        """Whether a contracting step goes row by row, holding every rhs chunk (+ chunks
        registers besides the accumulators), rather than chunk by chunk, holding every row's
        broadcast lhs value (+ rows). The first unless it would not fit the target's
        registers: with 16 ymm, a 2 x 6 tile spilled half its accumulators every step."""
        return rows * chunks + chunks + 1 <= self.registers or chunks <= rows

    def _step_by_rows(self, index, ivs, row_ids, chunks, vecs, slots) -> None:
        b = self.ctx.builder
        rhs = [self._rhs_values(index, ivs, chunk, self.cet) for chunk in chunks]
        for row_id, row in zip(row_ids, slots, strict=True):
            a = self._lhs_value(index, ivs, row_id)
            for slot, x, vec in zip(row, rhs, vecs, strict=True):
                b.store(self._fma(self._splat(a, vec), x, b.load(slot, typ=vec)), slot)

    def _step_by_chunks(self, index, ivs, row_ids, chunks, vecs, slots) -> None:
        b = self.ctx.builder
        lhs = [self._lhs_value(index, ivs, row_id) for row_id in row_ids]
        for c, (chunk, vec) in enumerate(zip(chunks, vecs, strict=True)):
            x = self._rhs_values(index, ivs, chunk, self.cet)
            for a, row in zip(lhs, slots, strict=True):
                b.store(self._fma(self._splat(a, vec), x, b.load(row[c], typ=vec)), row[c])

    def _at(self, index: list, row, col) -> list:
        out = list(index)
        if self.form.row_dim is not None:
            out[self.form.row_dim] = row
        if self.form.col_dim is not None:
            out[self.form.col_dim] = col
        return out

    def _lhs_value(self, index, ivs, row) -> ir.Value:
        li, _ = self.form.operand_indices(self._at(index, row, None), ivs)
        return convert_value(self.ctx, self.l_et, self.cet, self.lhs_gen(li))

    def _rhs_values(self, index, ivs, col_ids, et: ElemType) -> ir.Value:
        """The chunk's rhs values at one contracting position as a vector of `et`: one load
        where the columns are consecutive in memory (an operand in memory, ArrayGenerator;
        widened where rhs is a narrower integer), else element by element."""
        b = self.ctx.builder
        vec = ir.VectorType(et.value_type, len(col_ids))
        run = getattr(self.rhs_gen, "run", None)
        widens = self.r_et.is_integral and et.is_integral and self.r_et.bits < et.bits
        if run is not None and self.form.rf and (self.r_et == et or widens):
            _, ri = self.form.operand_indices(self._at(index, None, col_ids[0]), ivs)
            loaded = run(ri, self.form.rf[-1], len(col_ids))
            if loaded is not None:
                if not widens:
                    return loaded
                return b.sext(loaded, vec) if self.r_et.is_signed else b.zext(loaded, vec)
        row = ir.Constant(vec, ir.Undefined)
        for c, col in enumerate(col_ids):
            _, ri = self.form.operand_indices(self._at(index, None, col), ivs)
            value = convert_value(self.ctx, self.r_et, et, self.rhs_gen(ri))
            row = b.insert_element(row, value, ir.Constant(I32, c))
        return row

    def _splat(self, value: ir.Value, vec: ir.VectorType) -> ir.Value:
        b = self.ctx.builder
        one = b.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(I32, 0))
        mask = ir.Constant(ir.VectorType(I32, vec.count), [0] * vec.count)
        return b.shuffle_vector(one, ir.Constant(vec, ir.Undefined), mask)

    def _fma(self, a: ir.Value, x: ir.Value, acc: ir.Value) -> ir.Value:
        if self.cet.is_float:
            suffix = "f64" if self.cet.bits == 64 else "f32"
            return self.ctx.call(f"llvm.fmuladd.v{acc.type.count}{suffix}", [a, x, acc])
        b = self.ctx.builder
        return b.add(acc, b.mul(a, x))


# ---- where tiles are emitted ------------------------------------------------------------------

@special_segment(Opcode.DOT)
def plan_dot(spec: KernelSpec, item: RootItem):
    return DotSegment(spec, item) if tiled(item.instr) else None


class DotSegment(Segment):
    """A dot written to a kernel output: one tile per work unit, stored in place."""

    kind = "dot"

    def __init__(self, spec: KernelSpec, item: RootItem):
        self.spec, self.item = spec, item
        self.extent = tiling_of(item.instr).extent

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        instr = self.item.instr
        tiles = TileEmitter(kb.ctx, instr, kb.gen(instr.operands[0]), kb.gen(instr.operands[1]))
        out_et = elem_type(instr.shape.element_type)
        k = self.item.outputs[0]
        shape, ptr = self.spec.output_shapes[k], kb.outputs[k]

        def store(index, value):
            store_element(kb.ctx, shape, ptr, index, convert_value(kb.ctx, tiles.cet, out_et, value))

        def store_run(index, vector):  # the output's columns are contiguous, no conversion
            at = element_pointer(kb.ctx, out_et, ptr, linear_offset(kb.ctx, shape, index))
            b = kb.ctx.builder
            b.store(vector, b.bitcast(at, vector.type.as_pointer()), align=out_et.bits // 8)

        col = tiles.form.col_dim
        whole = (out_et == tiles.cet and out_et.value_type == out_et.storage_type
                 and col is not None and strides(shape)[col] == 1)
        tiles.emit(lo, hi, store, store_run if whole else None)


@emits(Opcode.DOT, target="cpu")
def dot(ctx, instr: Instruction, gens):
    """A small dot read inside its computation is computed here, whole, into a stack buffer;
    any other dot keeps the generic lowering (one element per call; the root dots that
    DotSegment writes never call it)."""
    if not buffered(instr):
        return generic_lowering(Opcode.DOT)(ctx, instr, gens)
    tiles = TileEmitter(ctx, instr, *gens)
    b, cet = ctx.builder, tiles.cet
    shape = row_major(instr.shape)
    buffer = ctx.alloca(cet.value_type, max(1, shape.num_elements), name="dot")

    def slot(index):
        return b.gep(buffer, [linear_offset(ctx, shape, index)], inbounds=True,
                     source_etype=cet.value_type)

    def store_run(index, vector):  # row-major: a tile row's columns are consecutive
        b.store(vector, b.bitcast(slot(index), vector.type.as_pointer()), align=cet.bits // 8)

    if tiles.tiling.extent:
        tiles.emit(ctx.i64(0), ctx.i64(tiles.tiling.extent), lambda i, v: b.store(v, slot(i)),
                   store_run, overlap=True)
    out_et = elem_type(instr.shape.element_type)
    return lambda index: convert_value(ctx, cet, out_et, b.load(slot(index), typ=cet.value_type))
