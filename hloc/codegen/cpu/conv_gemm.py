"""LLVM IR of hloc's native f32 convolution: an implicit GEMM over the padded NHWC input.

Why: run as one native GEMM per (image, kernel row) (runtime/cpu/conv.py's direct form), a 3x3
convolution re-reads and re-writes its output once per kernel row, reads the filter with a
row stride of O floats (a new cache line every k step of a 16-column panel) and re-packs A for
every MR rows of every kernel row; on an AVX2 core that ran a ResNet layer (8x56x56x64, 3x3x64
-> 64) at about half the speed of a plain GEMM of the same flops.

Here the output positions of all images are the rows of one product, [N*OH*OW, KH*KW*C] @
[KH*KW*C, O], without an im2col matrix: row (n, oh, ow) of A is KH segments of KW*C contiguous
floats of the zero-padded input xp (N, HP, WP, C), starting at xp[n, oh*sh + i*dh, ow*sw, 0]
(window dilation along H only; the runtime checks that W has none). The micro-kernel keeps an
MR x NR tile of C in registers and broadcasts straight from the MR rows' input pointers (no
packed A: for C = 64 the packing cost as much as a third of the multiply-adds), so a tile runs
the whole depth KH*KW*C in one pass and writes C once. The filter is packed once per run into
zero-padded panels of NR columns (`hloc_sconv_pack`, the GEMM's B packing), contiguous per
panel, so the panel streams through L1 from L2.

Loop nest of `hloc_sconv` for rows [m0, m1): blocks of MB rows (their input stays in L2),
within a block each NR-column panel, within it each MR-row tile. Geometries (register tile,
vector width) are the GEMM's (codegen/cpu/gemm.py): the runtime picks one from the target's
features. All strides are in elements.
"""

from __future__ import annotations

import enum

from llvmlite import ir

from ..target import MXCSR_FTZ_DAZ
from .gemm import F32, I1, I64, PTR, Geometry, _at, _Builder, _dispatch, _i64, _loop, _smin

# i64s describing one call of hloc_sconv (its argument list, see `_ConvBuilder.conv`),
# followed by its epilogue: a count and EPILOGUE_OPS (code, address, row stride) triples.
CONV_WORDS = 15
EPILOGUE_OPS = 4
CALL_WORDS = CONV_WORDS + 1 + 3 * EPILOGUE_OPS
# Output rows per block: MR-row tiles sharing their input rows while every panel runs.
BLOCK_TILES = 16


class Epilogue(enum.IntEnum):
    """Elementwise ops applied to a finished tile, in order, before it is stored: what a
    fusion computes from a convolution's result in a ResNet block (a per-feature scale and
    bias, a residual, a ReLU), each as the unfused kernel computes it (no contraction into
    FMAs, XLA's maximum), so fusing changes no bit."""

    MUL_COLUMN = 1  # x * v[column]
    ADD_COLUMN = 2  # x + v[column]
    ADD = 3  # x + y[row, column] (y with its own row stride)
    MAX_ZERO = 4  # maximum(x, +0.0)
    ZERO_MAX = 5  # maximum(+0.0, x)


class _ConvBuilder(_Builder):
    """Builds the convolution functions of one module for one Geometry."""

    def conv_tile(self, rows: int) -> ir.Function:
        """tile(segs, seglen, segstride, rowp, bp, c, ldc, ncols, epi, m, col): C[rows, :ncols]
        = the epilogue `epi` (a count, then triples; whole tiles only) applied to the sum over
        segments s and k < seglen of A[r][s * segstride + k] * P[s * seglen + k, :], A[r] the
        r-th address in rowp, P a packed panel (NR floats per k, zero beyond ncols); the tile
        is rows m.. and columns col.. of the whole output."""
        geo, vec = self.geo, self.vec
        fn, b = self._internal(f"hloc_sconv_tile{rows}",
                               [I64, I64, I64, PTR, PTR, PTR, I64, I64, PTR, I64, I64])
        fn.attributes.add("noinline")  # the k loop keeps the general registers to itself
        segs, seglen, segstride, rowp, bp, c, ldc, ncols, epi, m, col = fn.args
        buf = b.alloca(F32, size=rows * geo.nr)
        accs = [[b.alloca(vec) for _ in range(geo.vectors)] for _ in range(rows)]
        zero = ir.Constant(vec, [0.0] * geo.lanes)
        for row in accs:
            for slot in row:
                b.store(zero, slot)
        bases = [b.inttoptr(b.load(b.gep(rowp, [_i64(r)], inbounds=True, source_etype=I64),
                                   typ=I64), PTR) for r in range(rows)]
        with _loop(b, 0, segs, name="s") as s:
            a_rows = [_at(b, base, b.mul(s, segstride)) for base in bases]
            panel_s = _at(b, bp, b.mul(b.mul(s, seglen), _i64(geo.nr)))
            with _loop(b, 0, seglen, name="k") as k:
                p_k = _at(b, panel_s, b.mul(k, _i64(geo.nr)))
                panel = [b.load(_at(b, p_k, _i64(geo.lanes * h)), typ=vec, align=4)
                         for h in range(geo.vectors)]
                for a_row, row in zip(a_rows, accs, strict=True):
                    splat = self._splat(b, b.load(_at(b, a_row, k), typ=F32))
                    for slot, p in zip(row, panel, strict=True):
                        b.store(b.call(self.fma, [splat, p, b.load(slot, typ=vec)]), slot)
        self._epilogue(b, accs, epi, m, col)
        cp, ldcp, full = self._c_tile(b, rows, buf, c, ldc, ncols, ir.Constant(I1, 0))
        for r, row in enumerate(accs):
            for h, slot in enumerate(row):
                dst = _at(b, cp, b.add(b.mul(_i64(r), ldcp), _i64(geo.lanes * h)))
                b.store(b.load(slot, typ=vec), dst, align=4)
        self._copy_columns(b, rows, buf, _i64(geo.nr), c, ldc, ncols, b.not_(full))
        b.ret_void()
        return fn

    def _epilogue(self, b, accs, epi, m, col) -> None:
        """The epilogue's ops on the accumulators: op i runs when i < the count, as the case
        of a switch on its code (an unknown code does nothing)."""
        fn = b.function

        def word(i: int) -> ir.Value:
            return b.load(b.gep(epi, [_i64(i)], inbounds=True, source_etype=I64), typ=I64)

        count = word(0)
        for i in range(EPILOGUE_OPS):
            code, address, ld = (word(1 + 3 * i + j) for j in range(3))
            code = b.select(b.icmp_signed("<", _i64(i), count), code, _i64(0))
            done = fn.append_basic_block(f"epi{i}.done")
            switch = b.switch(code, done)
            for op in Epilogue:
                block = fn.append_basic_block(f"epi{i}.{op.name.lower()}")
                switch.add_case(_i64(op.value), block)
                b.position_at_end(block)
                self._apply(b, op, accs, b.inttoptr(address, PTR), ld, m, col)
                b.branch(done)
            b.position_at_end(done)

    def _apply(self, b, op: Epilogue, accs, p, ld, m, col) -> None:
        """One epilogue op on every accumulator of the tile."""
        geo, vec = self.geo, self.vec
        zero = ir.Constant(vec, [0.0] * geo.lanes)
        ivec = ir.VectorType(ir.IntType(32), geo.lanes)
        for r, row in enumerate(accs):
            for h, slot in enumerate(row):
                x = b.load(slot, typ=vec)
                column = b.add(col, _i64(geo.lanes * h))
                if op in (Epilogue.MUL_COLUMN, Epilogue.ADD_COLUMN):
                    v = b.load(_at(b, p, column), typ=vec, align=4)
                    x = b.fmul(x, v) if op == Epilogue.MUL_COLUMN else b.fadd(x, v)
                elif op == Epilogue.ADD:
                    at = b.add(b.mul(b.add(m, _i64(r)), ld), column)
                    x = b.fadd(x, b.load(_at(b, p, at), typ=vec, align=4))
                elif op == Epilogue.MAX_ZERO:  # XLA's max(x, +0): x when x > 0 or NaN
                    keep = b.or_(b.fcmp_ordered(">", x, zero), b.fcmp_unordered("uno", x, x))
                    x = b.select(keep, x, zero)
                else:  # XLA's max(+0, x): +0 when x < 0, else x with its sign bit cleared
                    cleared = b.and_(b.bitcast(x, ivec), ir.Constant(ivec, [0x7FFFFFFF] * geo.lanes))
                    x = b.select(b.fcmp_ordered("<", x, zero), zero, b.bitcast(cleared, vec))
                b.store(x, slot)

    def pack(self) -> None:
        """hloc_sconv_pack(k, o, b, ldb, dst): the filter B[:k, :o] as zero-padded panels of NR
        columns, panel p at dst + p * NR * k (the GEMM's B packing, exported)."""
        inner = self.pack_b()
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, I64, PTR]),
                         "hloc_sconv_pack")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.call(inner, list(fn.args))
        b.ret_void()

    def conv(self, tiles: list[ir.Function]) -> None:
        """hloc_sconv(words): output rows [m0, m1) of C = A @ B for the CONV_WORDS i64s
        m0, m1, ohw, ow, x, x_img, x_row, x_col, segs, seglen, segstride, bp, o, c, ldc: row m
        = (n, oh, ow) of A starts at x + n*x_img + oh*x_row + ow*x_col, bp is the packed
        filter (segs * seglen deep, o columns), C has row stride ldc; then the epilogue.
        Like hloc's kernels (and XLA's), it runs with denormals flushed (MXCSR FTZ|DAZ)."""
        geo = self.geo
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), "hloc_sconv")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        saved = self._flush_denormals(b)
        words = [b.load(b.gep(fn.args[0], [_i64(i)], inbounds=True, source_etype=I64), typ=I64)
                 for i in range(CONV_WORDS)]
        epi = b.gep(fn.args[0], [_i64(CONV_WORDS)], inbounds=True, source_etype=I64)
        m0, m1, ohw, ow, x, x_img, x_row, x_col, segs, seglen, segstride, bp, o, c, ldc = words
        block = geo.mr * BLOCK_TILES
        rowp = b.alloca(I64, size=block)
        depth = b.mul(segs, seglen)
        with _loop(b, m0, m1, block, name="mb") as mb:
            nrows = _smin(b, b.sub(m1, mb), _i64(block))
            with _loop(b, 0, nrows, name="row") as t:
                m = b.add(mb, t)
                rem = b.srem(m, ohw)
                offset = b.add(b.mul(b.sdiv(m, ohw), x_img), b.add(
                    b.mul(b.sdiv(rem, ow), x_row), b.mul(b.srem(rem, ow), x_col)))
                address = b.add(x, b.mul(offset, _i64(4)))  # bytes
                b.store(address, b.gep(rowp, [t], inbounds=True, source_etype=I64))
            with _loop(b, 0, o, geo.nr, name="jr") as jr:
                panel = _at(b, b.inttoptr(bp, PTR), b.mul(jr, depth))
                with _loop(b, 0, nrows, geo.mr, name="ic") as ic:
                    crow = b.add(b.mul(b.add(mb, ic), ldc), jr)
                    args = [segs, seglen, segstride,
                            b.gep(rowp, [ic], inbounds=True, source_etype=I64), panel,
                            _at(b, b.inttoptr(c, PTR), crow), ldc,
                            _smin(b, b.sub(o, jr), _i64(geo.nr)), epi, b.add(mb, ic), jr]
                    _dispatch(b, _smin(b, b.sub(nrows, ic), _i64(geo.mr)), tiles, args)
        self._mxcsr(b, "ldmxcsr", saved)
        b.ret_void()

    def _flush_denormals(self, b) -> ir.Value:
        """Save MXCSR and set FTZ|DAZ; returns the saved word's slot."""
        i32 = ir.IntType(32)
        saved, mode = b.alloca(i32), b.alloca(i32)
        self._mxcsr(b, "stmxcsr", saved)
        b.store(b.or_(b.load(saved, typ=i32), ir.Constant(i32, MXCSR_FTZ_DAZ)), mode)
        self._mxcsr(b, "ldmxcsr", mode)
        return saved

    def _mxcsr(self, b, name: str, slot) -> None:
        fn = self.module.globals.get(f"llvm.x86.sse.{name}") or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [PTR]), f"llvm.x86.sse.{name}")
        b.call(fn, [slot])


def build_module(geo: Geometry) -> ir.Module:
    """The module defining `hloc_sconv` and `hloc_sconv_pack` for `geo` (no triple set)."""
    module = ir.Module(f"{geo.module_name}_conv")
    builder = _ConvBuilder(module, geo)
    builder.conv([builder.conv_tile(r) for r in range(1, geo.mr + 1)])
    builder.pack()
    return module


def module_text(geo: Geometry, target) -> str:
    """The IR text of `build_module(geo)` for `target` (what the runtime compiles and keys its
    object cache by)."""
    module = build_module(geo)
    module.triple, module.data_layout = target.triple, target.data_layout
    return str(module)
