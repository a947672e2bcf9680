"""LLVM IR of hloc's native f32 and bf16 GEMMs, one generator for every register geometry.

Why: numpy's OpenBLAS runs its AVX2 ("Haswell") kernels whenever OPENBLAS_CORETYPE says so
(or on AMD Zen, where it picks them by default); on a host with full-width AVX-512 that is
half the machine's speed, and its per-call overhead dominates the small products of loops (a
scan RNN). The runtime (runtime/cpu/gemm.py) picks a `Geometry`, compiles the module built
here once (object-cached) and calls `hloc_sgemm` through ctypes.

The loop nest is BLIS-style:

    for each batch, for each NC-column block, for each (equal, at most KC deep) k slice:
        pack B[slice, block] into zero-padded panels of NR columns (unless read in place)
        for each MR-row tile of A: pack it k-major, then for each panel: the micro-kernel

The micro-kernel keeps an MR x NR tile of C in MR * VECTORS vector registers, broadcasts one
element of each of the MR rows of A per step of k and multiplies it with the panel's vectors
(fused multiply-add, as XLA's Eigen kernels do). Row tails get their own micro-kernels (one
per row count) and column tails go through a zeroed stack tile, so any M, N, K works. All
strides are in elements; the innermost dimension of every operand is contiguous.

Two geometries: `AVX512` keeps a 12 x 32 tile in 24 of the 32 zmm registers; built for an
AVX2 host, LLVM would split each 512-bit operation into two and spill most of the 48
resulting accumulators, so `AVX2` keeps a 6 x 16 tile in 12 ymm accumulators, plus two panel
vectors and one broadcast = 15 of the 16 registers (the Haswell kernels of BLIS and OpenBLAS).

bf16 products with an f32 result (`hloc_bgemm`, what XLA's mixed-precision dots become: the
`bf16-dot-operands` pass) share the loop nest in one of two forms (`Operands`):
  - `BF16_PAIRS`, for hosts with AVX512_BF16 (Zen 4, Cooper Lake, Sapphire Rapids): A and B are
    packed as 32-bit words holding two bf16 of consecutive k, and the micro-kernel's multiply-add
    is `vdpbf16ps` (16 lanes of two products each, added in f32): twice the f32 kernel's
    multiply-adds per instruction, the instruction XLA's own library runs. Like it, it treats
    denormal bf16 inputs as zero and flushes denormal results (XLA's values do the same).
  - `BF16_WIDEN` elsewhere: the packing routines widen bf16 to f32 (a shift: exact) and the f32
    micro-kernels run unchanged, so no converted copy of either operand is written.

int8 products with an int32 result (`hloc_igemm`, quantized matmuls; `INT8_PAIRS`, built where
the geometry's pmaddwd exists) share it too: A and B are packed as 32-bit words of two int8 of
consecutive k sign-extended to int16, and the micro-kernel's multiply-add is pmaddwd (two
products per int32 lane, which two int8 products cannot overflow) and an integer add, one
vpdpwssd where the target has VNNI. Its int32 accumulators live in the same float vectors,
bitcast around the integer operations; C's int32s are added as integers.
"""

from __future__ import annotations

import contextlib

from llvmlite import ir

from ...util.record import dataclass
from .pool import add_call_job, add_job, add_kernel_job, add_pool

I1, I8, I16, I32, I64, F32 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), \
    ir.IntType(64), ir.FloatType()
PTR = ir.PointerType()
# i64s describing one product in hloc_sgemm_list's list (after its count and work words).
PRODUCT_WORDS = 14
# Bits of a product's last word (its flags): add to C's old values; A and B are bf16; A and B
# are int8 and C int32.
ACCUMULATE, BF16_OPERANDS, INT8_OPERANDS = 1, 2, 4


class _BFloat(ir.Type):
    """LLVM's bfloat type (llvmlite has none): the element type of vdpbf16ps' operands."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


@dataclass(frozen=True)
class Operands:
    """How a GEMM of the module reads A and B: their element type in memory, and whether its
    packing keeps pairs of consecutive k in one 32-bit word (bf16 pairs for vdpbf16ps, int8
    widened to int16 pairs for pmaddwd) or widens every element to f32 for the f32
    micro-kernels."""

    prefix: str  # of the function names: hloc_{prefix}gemm...
    element: ir.Type
    pairs: bool

    @property
    def bytes(self) -> int:
        return {F32: 4, I16: 2, I8: 1}[self.element]

    @property
    def integer(self) -> bool:
        """int8 operands, int32 accumulators and C."""
        return self.element == I8

    @property
    def k_per_word(self) -> int:
        """Steps of k per packed word."""
        return 2 if self.pairs else 1


F32_OPERANDS = Operands("s", F32, False)
BF16_PAIRS = Operands("b", I16, True)
BF16_WIDEN = Operands("b", I16, False)
INT8_PAIRS = Operands("i", I8, True)


@dataclass(frozen=True)
class Geometry:
    """Register tile MR x NR (NR = VECTORS vectors of LANES floats), cache blocks KC x NC, and
    the code-shape choices that were tuned per instruction set (see AVX512 / AVX2 below)."""

    mr: int
    lanes: int
    vectors: int
    kc: int
    nc: int
    module_name: str
    noinline_tiles: bool = False  # keep each micro-kernel a function of its own
    zero_tails_only: bool = False  # zero the column-tail stack tile only when it is used

    @property
    def nr(self) -> int:
        """Columns of C per micro-kernel tile (and per packed panel of B)."""
        return self.lanes * self.vectors

    @property
    def direct_rows(self) -> int:
        """Up to this many rows of A, B is read in place when it needs no padding."""
        return 3 * self.mr

    @property
    def work_floats(self) -> int:
        """The work buffer: a packed B block, then a packed A micro-panel."""
        return self.kc * (self.nc + self.nr) + self.kc * self.mr


# 24 zmm accumulators; an A micro-panel (256 x 12) stays in L1 and a 256 x 512 packed B block
# in L2. Its code shape (inlined tiles, stack tile always zeroed) is the one measured on
# AVX-512 hosts: changing it changes the object, which only such a host can re-time.
AVX512 = Geometry(mr=12, lanes=16, vectors=2, kc=256, nc=512, module_name="hloc_sgemm")

# 12 accumulators + 2 panel vectors + 1 broadcast of the 16 ymm registers; a 256 x 256 packed
# B block (256 KiB) stays in a Zen 2 / Haswell L2 next to the C tiles it updates. With 16
# general registers as well, inlined tiles reload spilled pointers in the k loop, and 6 x 16
# scalar stores zeroing an unused stack tile are a fifth of a short call's time.
AVX2 = Geometry(mr=6, lanes=8, vectors=2, kc=256, nc=256, module_name="hloc_sgemm_avx2",
                noinline_tiles=True, zero_tails_only=True)


def _i64(v: int) -> ir.Constant:
    """An i64 constant."""
    return ir.Constant(I64, v)


@contextlib.contextmanager
def _loop(b: ir.IRBuilder, lo, hi, step=1, name="i"):
    """A counted loop lo, lo+step, ... < hi (signed); yields the induction variable."""
    fn = b.function
    head, body, end = (fn.append_basic_block(f"{name}.{s}") for s in ("head", "body", "end"))
    pre = b.block
    b.branch(head)
    b.position_at_end(head)
    iv = b.phi(I64, name)
    iv.add_incoming(lo if isinstance(lo, ir.Value) else _i64(lo), pre)
    b.cbranch(b.icmp_signed("<", iv, hi if isinstance(hi, ir.Value) else _i64(hi)), body, end)
    b.position_at_end(body)
    yield iv
    iv.add_incoming(b.add(iv, step if isinstance(step, ir.Value) else _i64(step)), b.block)
    b.branch(head)
    b.position_at_end(end)


def _at(b, ptr, offset):
    """&ptr[offset] for a float pointer (offset in elements)."""
    return b.gep(ptr, [offset], inbounds=True, source_etype=F32)


_V4 = ir.VectorType(F32, 4)


def _transpose4(b, rows: list) -> list:
    """The four columns of the 4 x 4 matrix whose rows are the <4 x float> `rows`."""
    def pick(p, q, lanes):
        return b.shuffle_vector(p, q, ir.Constant(ir.VectorType(I32, 4), lanes))

    lo01, hi01 = pick(rows[0], rows[1], [0, 4, 1, 5]), pick(rows[0], rows[1], [2, 6, 3, 7])
    lo23, hi23 = pick(rows[2], rows[3], [0, 4, 1, 5]), pick(rows[2], rows[3], [2, 6, 3, 7])
    return [pick(lo01, lo23, [0, 1, 4, 5]), pick(lo01, lo23, [2, 3, 6, 7]),
            pick(hi01, hi23, [0, 1, 4, 5]), pick(hi01, hi23, [2, 3, 6, 7])]


def _smin(b, x, y):
    """min(x, y), signed."""
    return b.select(b.icmp_signed("<", x, y), x, y)


class _Builder:
    """Builds the functions of one GEMM module for one Geometry."""

    def __init__(self, module: ir.Module, geo: Geometry):
        """Declare the vector FMA intrinsic the micro-kernels call."""
        self.module, self.geo = module, geo
        self.vec = ir.VectorType(F32, geo.lanes)
        self.fma = ir.Function(module, ir.FunctionType(self.vec, [self.vec] * 3),
                               f"llvm.fma.v{geo.lanes}f32")

    def _internal(self, name: str, args: list) -> tuple[ir.Function, ir.IRBuilder]:
        """A new internal void function and a builder at its entry."""
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), args), name)
        fn.linkage = "internal"
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    def _vload(self, b, ptr):
        """A vector load at float alignment (rows of B and C need not be aligned)."""
        return b.load(ptr, typ=self.vec, align=4)

    def _splat(self, b, x):
        """x broadcast to every lane."""
        lanes = self.geo.lanes
        one = b.insert_element(ir.Constant(self.vec, ir.Undefined), x, _i64(0))
        return b.shuffle_vector(one, ir.Constant(self.vec, ir.Undefined),
                                ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    # ---- micro-kernel ---------------------------------------------------------------------

    def tile(self, rows: int, ops: Operands = F32_OPERANDS) -> ir.Function:
        """tile(kc, ap, bp, ldbp, c, ldc, ncols, accumulate): C[rows, :ncols] (+)= A @ P, A
        packed k-major (ap[k * MR + r]); P a kc x NR panel with row stride ldbp, zero beyond
        ncols (packed, or B itself when it has no column tail). Where `ops` packs pairs, the
        packed words are pairs of k, ceil(kc / 2) of them per row and column: bf16 pairs
        multiplied and added by vdpbf16ps (BF16_PAIRS), int16 pairs by pmaddwd into int32
        accumulators (INT8_PAIRS; vpdpwssd where LLVM has VNNI). The accumulators are float
        vectors whatever they hold (the int32 form bitcasts around its integer operations)."""
        geo, vec = self.geo, self.vec
        pairs = ops.pairs
        fn, b = self._internal(f"hloc_{ops.prefix if pairs else 's'}gemm_tile{rows}",
                               [I64, PTR, PTR, I64, PTR, I64, I64, I1])
        if geo.noinline_tiles:
            # Inlined into the loop nest, the k loop reloads spilled pointers from the stack:
            # kept apart, it has the general registers to itself.
            fn.attributes.add("noinline")
        kc, ap, bp, ldbp, c, ldc, ncols, accumulate = fn.args
        buf = b.alloca(F32, size=rows * geo.nr)
        accs = [[b.alloca(vec) for _ in range(geo.vectors)] for _ in range(rows)]
        cp, ldcp, full = self._c_tile(b, rows, buf, c, ldc, ncols, accumulate)
        madd = (self._pmaddwd if ops.integer else self._dpbf16) if pairs else self._fma

        def c_at(r, h):
            """&C[r, LANES * h] of the tile."""
            return _at(b, cp, b.add(b.mul(_i64(r), ldcp), _i64(geo.lanes * h)))

        # The accumulators start at zero and C's old values are added after the k loop, its
        # rows prefetched first: loaded up front, C's cache misses stalled the first steps
        # (each FMA chain starts from them), 1-4 % of a large product.
        zero = ir.Constant(vec, [0.0] * geo.lanes)
        for r, row in enumerate(accs):
            self._prefetch(b, c_at(r, 0), geo.nr * 4)
            for slot in row:
                b.store(zero, slot)
        steps = b.sdiv(b.add(kc, _i64(1)), _i64(2)) if pairs else kc
        with _loop(b, 0, steps, name="k") as k:
            panel = [self._vload(b, _at(b, bp, b.add(b.mul(k, ldbp), _i64(geo.lanes * h))))
                     for h in range(geo.vectors)]
            for r, row in enumerate(accs):
                x = b.load(_at(b, ap, b.add(b.mul(k, _i64(geo.mr)), _i64(r))), typ=F32)
                splat = self._splat(b, x)
                for slot, p in zip(row, panel, strict=True):
                    b.store(madd(b, splat, p, b.load(slot, typ=vec)), slot)
        for r, row in enumerate(accs):
            for h, slot in enumerate(row):
                value = b.load(slot, typ=vec)
                value = b.select(accumulate, self._add(b, ops, self._vload(b, c_at(r, h)), value),
                                 value)
                b.store(value, c_at(r, h), align=4)
        self._copy_columns(b, rows, buf, _i64(geo.nr), c, ldc, ncols, b.not_(full))
        b.ret_void()
        return fn

    def _fma(self, b, x, y, acc):
        """acc + x * y, fused."""
        return b.call(self.fma, [x, y, acc])

    def _add(self, b, ops: Operands, x, y):
        """x + y: float lanes, or for int8 products the int32 lanes their bits hold."""
        if not ops.integer:
            return b.fadd(x, y)
        ints = ir.VectorType(I32, self.geo.lanes)
        return b.bitcast(b.add(b.bitcast(x, ints), b.bitcast(y, ints)), self.vec)

    def _pmaddwd(self, b, x, y, acc):
        """acc + the products of the int16 pairs that x's and y's lanes hold, added per lane
        in int32 (pmaddwd, then an add: one vpdpwssd where the target has VNNI; the sum of
        two products of int8 values cannot overflow). Bits carried as float vectors."""
        lanes = self.geo.lanes
        name = {16: "llvm.x86.avx512.pmaddw.d.512", 8: "llvm.x86.avx2.pmadd.wd"}[lanes]
        pair_vec, ints = ir.VectorType(I16, 2 * lanes), ir.VectorType(I32, lanes)
        fn = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(ints, [pair_vec, pair_vec]), name)
        products = b.call(fn, [b.bitcast(x, pair_vec), b.bitcast(y, pair_vec)])
        return b.bitcast(b.add(b.bitcast(acc, ints), products), self.vec)

    def _dpbf16(self, b, x, y, acc):
        """acc + the products of the bf16 pairs that x's and y's lanes hold, per lane
        (vdpbf16ps; its operands' bits are the packed words, carried as float vectors)."""
        lanes = self.geo.lanes
        name = {16: "llvm.x86.avx512bf16.dpbf16ps.512",
                8: "llvm.x86.avx512bf16.dpbf16ps.256"}[lanes]
        pair_vec = ir.VectorType(_BFloat(), 2 * lanes)
        fn = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(self.vec, [self.vec, pair_vec, pair_vec]), name)
        return b.call(fn, [acc, b.bitcast(x, pair_vec), b.bitcast(y, pair_vec)])

    def _prefetch(self, b, ptr, nbytes: int) -> None:
        """Prefetch (for writing) the cache lines of the `nbytes` bytes at `ptr`."""
        fn = self.module.globals.get("llvm.prefetch.p0")
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]),
                             "llvm.prefetch.p0")
        write, keep, data = (ir.Constant(I32, v) for v in (1, 3, 1))
        for offset in [*range(0, nbytes, 64), nbytes - 4]:  # the last line, if unaligned
            b.call(fn, [b.gep(ptr, [_i64(offset // 4)], source_etype=F32), write, keep, data])

    def _c_tile(self, b, rows, buf, c, ldc, ncols, accumulate):
        """(pointer, row stride, ncols == NR) of the C tile the micro-kernel updates: C itself,
        or for a column tail the stack tile `buf`, zeroed and holding C's first ncols columns
        (copied back by the caller)."""
        nr = self.geo.nr
        full = b.icmp_signed("==", ncols, _i64(nr))
        # Zeroed only for column tails where the geometry says so (see AVX2).
        with b.if_then(b.not_(full)) if self.geo.zero_tails_only else contextlib.nullcontext():
            with _loop(b, 0, rows * nr, name="z") as i:
                b.store(ir.Constant(F32, 0.0), _at(b, buf, i))
        self._copy_columns(b, rows, c, ldc, buf, _i64(nr), ncols, b.and_(accumulate, b.not_(full)))
        return b.select(full, c, buf), b.select(full, ldc, _i64(nr)), full

    @staticmethod
    def _copy_columns(b, rows, src, lds, dst, ldd, ncols, when) -> None:
        """dst[r, :ncols] = src[r, :ncols] for r < rows, if `when`."""
        fn = b.function
        yes, done = fn.append_basic_block("copy"), fn.append_basic_block("copied")
        b.cbranch(when, yes, done)
        b.position_at_end(yes)
        for r in range(rows):
            with _loop(b, 0, ncols, name="cc") as j:
                v = b.load(_at(b, src, b.add(b.mul(_i64(r), lds), j)), typ=F32)
                b.store(v, _at(b, dst, b.add(b.mul(_i64(r), ldd), j)))
        b.branch(done)
        b.position_at_end(done)

    # ---- packing --------------------------------------------------------------------------

    def pack_b(self, ops: Operands = F32_OPERANDS) -> ir.Function:
        """pack(kc, nc, b, ldb, dst): B[:kc, :nc] as panels of NR columns, zero-padded, each
        `_depth(kc)` rows of NR words (f32 values, or for BF16_PAIRS the bf16 of rows 2i and
        2i + 1 of a column in one word, the second zero past kc)."""
        geo = self.geo
        fn, b = self._internal(f"hloc_{ops.prefix}gemm_pack", [I64, I64, PTR, I64, PTR])
        kc, nc, src, ldb, dst = fn.args
        depth = _depth(b, ops, kc)
        last = b.sub(nc, _i64(1))
        full = b.sub(nc, b.srem(nc, _i64(geo.nr)))
        with _loop(b, 0, full, geo.nr, name="p") as p:  # whole panels: vector copies
            out = _at(b, dst, b.mul(p, depth))
            with _loop(b, 0, depth, name="pv") as k:
                for h in range(geo.vectors):
                    col = b.add(p, _i64(geo.lanes * h))
                    b.store(self._b_words(b, ops, src, ldb, kc, k, col),
                            _at(b, out, b.add(b.mul(k, _i64(geo.nr)), _i64(geo.lanes * h))),
                            align=4)
        with _loop(b, full, nc, geo.nr, name="p") as p:  # the column tail, zero-padded
            out = _at(b, dst, b.mul(p, depth))
            with _loop(b, 0, depth, name="pk") as k:
                for j in range(geo.nr):
                    col = b.add(p, _i64(j))
                    v = self._b_word(b, ops, src, ldb, kc, k, _smin(b, col, last))
                    v = b.select(b.icmp_signed("<", col, nc), v, ir.Constant(F32, 0.0))
                    b.store(v, _at(b, out, b.add(b.mul(k, _i64(geo.nr)), _i64(j))))
        b.ret_void()
        return fn

    def _b_words(self, b, ops: Operands, src, ldb, kc, k, col):
        """The LANES packed words of packed row k of B from column col on (a float vector)."""
        lanes = self.geo.lanes
        if ops.element == F32:
            return self._vload(b, _at(b, src, b.add(b.mul(k, ldb), col)))
        if not ops.pairs:
            return _widen(b, b.load(_elem_at(b, ops, src, b.add(b.mul(k, ldb), col)),
                                    typ=ir.VectorType(I16, lanes), align=2))
        first, second, has_second = _pair_rows(b, kc, k, ldb)
        halves = ir.VectorType(I16, lanes)
        v0, v1 = (_as_i16(b, ops, b.load(_elem_at(b, ops, src, b.add(row, col)),
                                         typ=ir.VectorType(ops.element, lanes), align=ops.bytes))
                  for row in (first, second))
        v1 = b.select(has_second, v1, ir.Constant(halves, [0] * lanes))
        mixed = [i for j in range(lanes) for i in (j, lanes + j)]  # column j: rows 2k, 2k + 1
        words = b.shuffle_vector(v0, v1, ir.Constant(ir.VectorType(I32, 2 * lanes), mixed))
        return b.bitcast(words, self.vec)

    def _b_word(self, b, ops: Operands, src, ldb, kc, k, col):
        """The packed word of packed row k of B in column col (a float)."""
        if ops.element == F32:
            return b.load(_at(b, src, b.add(b.mul(k, ldb), col)), typ=F32)
        if not ops.pairs:
            return _widen(b, b.load(_elem_at(b, ops, src, b.add(b.mul(k, ldb), col)), typ=I16))
        first, second, has_second = _pair_rows(b, kc, k, ldb)
        low, high = (b.zext(_as_i16(b, ops, b.load(_elem_at(b, ops, src, b.add(row, col)),
                                                   typ=ops.element)), I32)
                     for row in (first, second))
        high = b.select(has_second, b.shl(high, ir.Constant(I32, 16)), ir.Constant(I32, 0))
        return b.bitcast(b.or_(low, high), F32)

    def pack_a(self, ops: Operands = F32_OPERANDS) -> ir.Function:
        """pack_a(kc, rows, a, lda, dst): dst[k * MR + r] = A[r, k], so the micro-kernel reads
        its broadcasts at fixed offsets from one pointer (MR row pointers would spill). For
        pairs (BF16_PAIRS, INT8_PAIRS), k counts words: the two elements of A[r, 2k:2k + 2]
        (contiguous in A; int8 widened to int16), the second zero past an odd kc.

        Four rows by four k at a time: four 4-word loads, transposed in registers, four
        4-word stores (rows beyond a multiple of four, and the last kc % 4 steps, one word
        at a time). A tile of fewer than MR rows packs its last row again in the rows it does
        not have (its micro-kernel never reads them). As one loop over rows and k, LLVM made
        the stores MR floats apart into AVX-512 scatters: packing A took about a tenth of a
        1024^3 product on Zen 4, a few percent now."""
        mr = self.geo.mr
        fn, b = self._internal(f"hloc_{ops.prefix}gemm_pack_a", [I64, I64, PTR, I64, PTR])
        kc, rows, src, lda, dst = fn.args
        last = b.sub(rows, _i64(1))
        row_at = [_elem_at(b, ops, src, b.mul(_smin(b, _i64(r), last), lda)) for r in range(mr)]
        words = b.sdiv(kc, _i64(2)) if ops.pairs else kc

        def dst_at(k, r):
            return _at(b, dst, b.add(b.mul(k, _i64(mr)), _i64(r)))

        def load4(row, k):
            return _a_words(b, ops, row, k, 4)

        def load1(row, k):
            return _a_words(b, ops, row, k, 1)

        quads = b.mul(b.sdiv(words, _i64(4)), _i64(4))
        with _loop(b, 0, quads, 4, name="aq") as k:
            for g in range(0, mr - mr % 4, 4):
                x = [load4(row_at[g + i], k) for i in range(4)]
                for j, column in enumerate(_transpose4(b, x)):
                    b.store(column, dst_at(b.add(k, _i64(j)), g), align=4)
            for j in range(4):
                kj = b.add(k, _i64(j))
                for r in range(mr - mr % 4, mr):
                    b.store(load1(row_at[r], kj), dst_at(kj, r))
        with _loop(b, quads, words, name="ak") as k:
            for r in range(mr):
                b.store(load1(row_at[r], k), dst_at(k, r))
        if ops.pairs:  # an odd kc: its last word holds A[r, kc - 1] and a zero
            with b.if_then(b.icmp_signed("!=", b.srem(kc, _i64(2)), _i64(0))):
                for r, row in enumerate(row_at):
                    v = b.load(_elem_at(b, ops, row, b.sub(kc, _i64(1))), typ=ops.element)
                    b.store(b.bitcast(b.zext(_as_i16(b, ops, v), I32), F32), dst_at(words, r))
        b.ret_void()
        return fn

    # ---- the loop nest --------------------------------------------------------------------

    def gemm(self, tiles: list[ir.Function], pack_b: ir.Function, pack_a: ir.Function,
             ops: Operands = F32_OPERANDS) -> ir.Function:
        """hloc_{s,b}gemm(batch, m, n, k, a, sa, lda, b, sb, ldb, c, sc, ldc, work, flags):
        C (+)= A @ B per batch, adding to C's old values when flags has ACCUMULATE. A and B
        hold `ops.element`s, C f32s (int32s for INT8_PAIRS)."""
        geo = self.geo
        fnty = ir.FunctionType(ir.VoidType(), [I64] * 4 + [PTR, I64, I64] * 3 + [PTR, I64])
        fn = ir.Function(self.module, fnty, f"hloc_{ops.prefix}gemm")
        batch, m, n, k, a, sa, lda, bm, sb, ldb, c, sc, ldc, work, flags = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        a_work = _at(b, work, _i64(geo.kc * (geo.nc + geo.nr)))
        # Equal k slices of at most KC words: a short last slice would cost a full pass over
        # C (for pairs, even slices: each word pairs two k of one slice).
        most = geo.kc * ops.k_per_word
        slices = b.sdiv(b.add(k, _i64(most - 1)), _i64(most))
        kstep = b.sdiv(b.add(k, b.sub(slices, _i64(1))), slices)
        if ops.pairs:
            kstep = b.and_(b.add(kstep, _i64(1)), _i64(-2))
        accumulate_c = b.icmp_signed("!=", b.and_(flags, _i64(ACCUMULATE)), _i64(0))
        with _loop(b, 0, batch, name="bat") as t:
            a_t, b_t = (_elem_at(b, ops, p, b.mul(t, s)) for p, s in ((a, sa), (bm, sb)))
            c_t = _at(b, c, b.mul(t, sc))
            with _loop(b, 0, n, geo.nc, name="jc") as jc:
                nc = _smin(b, b.sub(n, jc), _i64(geo.nc))
                # B is read in place when it needs no zero padding and few row tiles use it
                # or it is one contiguous block already (whole rows of B); f32 B only.
                direct = b.and_(b.or_(b.icmp_signed("<=", m, _i64(geo.direct_rows)),
                                      b.icmp_signed("==", ldb, nc)),
                                b.icmp_signed("==", b.srem(nc, _i64(geo.nr)), _i64(0)))
                if ops != F32_OPERANDS:
                    direct = ir.Constant(I1, 0)
                with _loop(b, 0, k, kstep, name="pc") as pc:
                    kc = _smin(b, b.sub(k, pc), kstep)
                    b_block = _elem_at(b, ops, b_t, b.add(b.mul(pc, ldb), jc))
                    _call_unless(b, direct, pack_b, [kc, nc, b_block, ldb, work])
                    accumulate = b.or_(b.icmp_signed(">", pc, _i64(0)), accumulate_c)
                    ks = _KSlice(m, nc, jc, pc, kc, direct, b_block, ldb, accumulate)
                    self._row_tiles(b, ks, tiles, pack_a, (a_t, lda), (c_t, ldc), work, a_work,
                                    ops)
        b.ret_void()
        return fn

    def product_list(self, sgemm: ir.Function, bgemm: ir.Function | None = None,
                     igemm: ir.Function | None = None) -> ir.Function:
        """hloc_sgemm_list(list): the products of a list of i64s [count, work, then per product
        batch, m, n, k, a, sa, lda, b, sb, ldb, c, sc, ldc, flags], one after the other, each
        by `bgemm` where its flags say BF16_OPERANDS, `igemm` where they say INT8_OPERANDS
        (none without it: the runtime lists no such product), else `sgemm`. One pointer
        argument: the runtime calls it as cheaply as a kernel (a ctypes call with fifteen converted
        arguments costs ten times as much). Returns the internal list_with(list, work), which
        takes the packing buffer apart from the list (pieces of one job share lists' words
        but not buffers)."""
        with_fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, PTR]),
                              "hloc_sgemm_list_with")
        with_fn.linkage = "internal"
        b = ir.IRBuilder(with_fn.append_basic_block("entry"))
        lst, work = with_fn.args

        def word(index) -> ir.Value:
            return b.load(b.gep(lst, [index], inbounds=True, source_etype=I64), typ=I64)

        with _loop(b, 0, word(_i64(0)), name="e") as e:
            base = b.add(_i64(2), b.mul(e, _i64(PRODUCT_WORDS)))
            w = [word(b.add(base, _i64(i))) for i in range(PRODUCT_WORDS)]
            batch, m, n, k, a, sa, lda, bm, sb, ldb, c, sc, ldc, flags = w
            args = [batch, m, n, k, b.inttoptr(a, PTR), sa, lda, b.inttoptr(bm, PTR), sb, ldb,
                    b.inttoptr(c, PTR), sc, ldc, work, flags]
            chosen = sgemm
            for flag, other in ((BF16_OPERANDS, bgemm), (INT8_OPERANDS, igemm)):
                if other is not None:
                    chosen = (flag, other, chosen)
            _call_by_flags(b, flags, chosen, args)
        b.ret_void()
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), "hloc_sgemm_list")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        (lst,) = fn.args
        work = b.load(b.gep(lst, [_i64(1)], inbounds=True, source_etype=I64), typ=I64)
        b.call(with_fn, [lst, b.inttoptr(work, PTR)])
        b.ret_void()
        return with_fn

    def _row_tiles(self, b, ks: _KSlice, tiles, pack_a, a, c, work, a_work,
                   ops: Operands = F32_OPERANDS) -> None:
        """The micro-kernel calls of one k slice of one column block: for each MR-row tile of
        A, pack it (into a_work), then update each NR-column panel of C. a and c are (base of
        this batch, row stride); the packed panels of B (unless read in place) are at work."""
        geo, (a_t, lda), (c_t, ldc) = self.geo, a, c
        depth = _depth(b, ops, ks.kc)
        with _loop(b, 0, ks.m, geo.mr, name="ic") as ic:
            rows = _smin(b, b.sub(ks.m, ic), _i64(geo.mr))
            b.call(pack_a, [ks.kc, rows, _elem_at(b, ops, a_t, b.add(b.mul(ic, lda), ks.pc)),
                            lda, a_work])
            with _loop(b, 0, ks.nc, geo.nr, name="jr") as jr:
                panel = b.select(ks.direct, _at(b, ks.b_block, jr), _at(b, work, b.mul(jr, depth)))
                args = [ks.kc, a_work, panel, b.select(ks.direct, ks.ldb, _i64(geo.nr)),
                        _at(b, c_t, b.add(b.mul(ic, ldc), b.add(ks.jc, jr))), ldc,
                        _smin(b, b.sub(ks.nc, jr), _i64(geo.nr)), ks.accumulate]
                _dispatch(b, rows, tiles, args)


def _call_by_flags(b, flags, chosen, args) -> None:
    """Call the function `chosen` names: a function, or (flag, if set, else chosen)."""
    if isinstance(chosen, ir.Function):
        b.call(chosen, args)
        return
    flag, fn, otherwise_chosen = chosen
    with b.if_else(b.icmp_signed("!=", b.and_(flags, _i64(flag)), _i64(0))) as (then, other):
        with then:
            b.call(fn, args)
        with other:
            _call_by_flags(b, flags, otherwise_chosen, args)


def _as_i16(b, ops: Operands, value):
    """An int8 value (or vector) sign-extended to int16; others as they are (bf16 bits)."""
    if not ops.integer:
        return value
    if isinstance(value.type, ir.VectorType):
        return b.sext(value, ir.VectorType(I16, value.type.count))
    return b.sext(value, I16)


def _depth(b, ops: Operands, kc):
    """Packed rows (words per column) of a k slice of kc steps."""
    return b.sdiv(b.add(kc, _i64(1)), _i64(2)) if ops.pairs else kc


def _elem_at(b, ops: Operands, ptr, offset):
    """&ptr[offset] for a pointer to A's or B's elements (offset in elements)."""
    return b.gep(ptr, [offset], inbounds=True, source_etype=ops.element)


def _a_words(b, ops: Operands, row, k, n: int):
    """Packed words k .. k + n - 1 (n = 4: a <4 x float>; 1: a float) of a row of A: f32
    values, bf16 pairs (two elements a word, at 2-byte alignment), int8 pairs widened to int16,
    or bf16 widened to f32."""
    if ops.integer:
        pairs = b.load(_elem_at(b, ops, row, b.mul(k, _i64(2))), typ=ir.VectorType(I8, 2 * n),
                       align=1)
        return b.bitcast(_as_i16(b, ops, pairs), _V4 if n == 4 else F32)
    if ops.element == F32 or ops.pairs:
        return b.load(_at(b, row, k), typ=_V4 if n == 4 else F32, align=ops.bytes)
    bits = ir.VectorType(I16, 4) if n == 4 else I16
    return _widen(b, b.load(_elem_at(b, ops, row, k), typ=bits, align=2))


def _widen(b, bits):
    """bf16 bits (an i16 or a vector of them) as the f32 values they are: shifted to the top."""
    if isinstance(bits.type, ir.VectorType):
        n = bits.type.count
        wide = b.shl(b.zext(bits, ir.VectorType(I32, n)), ir.Constant(ir.VectorType(I32, n),
                                                                      [16] * n))
        return b.bitcast(wide, ir.VectorType(F32, n))
    return b.bitcast(b.shl(b.zext(bits, I32), ir.Constant(I32, 16)), F32)


def _pair_rows(b, kc, k, ldb):
    """(offset of row 2k, offset of row 2k + 1 or of row 2k past kc, whether 2k + 1 < kc)."""
    first = b.mul(b.mul(k, _i64(2)), ldb)
    has_second = b.icmp_signed("<", b.add(b.mul(k, _i64(2)), _i64(1)), kc)
    return first, b.select(has_second, b.add(first, ldb), first), has_second


@dataclass(frozen=True)
class _KSlice:
    """The IR values describing one k slice (rows pc..pc+kc of B) of one column block (columns
    jc..jc+nc): B's block read in place (`direct`) or packed, accumulating into C or not."""

    m: ir.Value
    nc: ir.Value
    jc: ir.Value
    pc: ir.Value
    kc: ir.Value
    direct: ir.Value
    b_block: ir.Value
    ldb: ir.Value
    accumulate: ir.Value


def _call_unless(b, skip, fn, args) -> None:
    """Call fn(*args) unless `skip` (an i1) holds."""
    yes, done = b.function.append_basic_block("call"), b.function.append_basic_block("called")
    b.cbranch(skip, done, yes)
    b.position_at_end(yes)
    b.call(fn, args)
    b.branch(done)
    b.position_at_end(done)


def _dispatch(b, rows, tiles, args) -> None:
    """Call the micro-kernel for `rows` rows (1..MR)."""
    fn = b.function
    done = fn.append_basic_block("tiled")
    cases = [fn.append_basic_block(f"rows{r}") for r in range(1, len(tiles) + 1)]
    switch = b.switch(rows, cases[-1])
    for r, block in enumerate(cases, start=1):
        switch.add_case(_i64(r), block)
        b.position_at_end(block)
        b.call(tiles[r - 1], args)
        b.branch(done)
    b.position_at_end(done)


def build_module(geo: Geometry, dpbf16: bool = False, int8: bool = False) -> ir.Module:
    """The module defining `hloc_sgemm` and `hloc_bgemm` for `geo` (the latter with vdpbf16ps
    where `dpbf16`, for targets with AVX512_BF16), with `int8` an int8 GEMM (pmaddwd at the
    geometry's width: AVX2, or AVX-512BW for the AVX512 one) reached through the product
    lists, their product lists and jobs, the native pool that runs them, and kernel and call
    jobs (pool.add_kernel_job, add_call_job); no triple or data layout."""
    module = ir.Module(geo.module_name)
    builder = _Builder(module, geo)
    tiles = [builder.tile(r) for r in range(1, geo.mr + 1)]
    sgemm = builder.gemm(tiles, builder.pack_b(), builder.pack_a())
    if dpbf16:
        ops, btiles = BF16_PAIRS, [builder.tile(r, BF16_PAIRS) for r in range(1, geo.mr + 1)]
    else:
        ops, btiles = BF16_WIDEN, tiles
    bgemm = builder.gemm(btiles, builder.pack_b(ops), builder.pack_a(ops), ops)
    igemm = None
    if int8:
        itiles = [builder.tile(r, INT8_PAIRS) for r in range(1, geo.mr + 1)]
        igemm = builder.gemm(itiles, builder.pack_b(INT8_PAIRS), builder.pack_a(INT8_PAIRS),
                             INT8_PAIRS)
    list_with = builder.product_list(sgemm, bgemm, igemm)
    run = add_pool(module)
    add_job(module, list_with, run)
    add_kernel_job(module, run)
    add_call_job(module, run)
    return module


def module_text(geo: Geometry, target, dpbf16: bool = False, int8: bool = False) -> str:
    """The IR text of `build_module(geo, dpbf16, int8)` for `target` (a CpuTarget): what the
    runtime compiles and keys its object cache by, so the key follows the generated code
    exactly."""
    module = build_module(geo, dpbf16, int8)
    module.triple, module.data_layout = target.triple, target.data_layout
    return str(module)
