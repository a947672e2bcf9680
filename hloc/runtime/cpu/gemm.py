"""A native f32 GEMM for AVX-512 hosts, generated with llvmlite and JIT-compiled once.

Why: numpy's OpenBLAS runs its AVX2 ("Haswell") kernels whenever OPENBLAS_CORETYPE says
so (or on AMD Zen, where it picks them by default); on a host with full-width AVX-512 that
is half the machine's speed, and its per-call overhead dominates the small products of
loops (a scan RNN). This GEMM is a BLIS-style loop nest:

    for each batch, for each NC-column block, for each KC-deep slice:
        pack B[slice, block] into zero-padded panels of NR=32 columns (kc x 32 each)
        for each MR-row tile of A, for each panel: a register-tiled micro-kernel

The micro-kernel keeps an MR x 32 tile of C in 2*MR zmm registers, broadcasts one element
of each of the MR rows of A per step of k and multiplies it with the panel's two vectors
(fused multiply-add, as XLA's Eigen kernels do). Row tails get their own micro-kernels
(one per row count) and column tails go through a small stack tile, so any M, N, K works.
All strides are in elements; the innermost dimension of every operand is contiguous.

On AVX2 + FMA hosts without AVX-512 the same function is built from a tile sized for 16 ymm
registers (codegen/cpu/gemm_avx2.py). `sgemm_runner()` returns None where the host has
neither or HLOC_CPU_GEMM=blas is set (callers then stay with BLAS).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading

import numpy as np
from llvmlite import ir

from ... import __version__
from ...util.objcache import cache_key, cached_object

MR, NR = 12, 32  # rows of A per micro-kernel, columns of B per packed panel (two zmm)
KC, NC = 256, 512  # k slice (an A micro-panel stays in L1) x column block (B block in L2)
DIRECT_ROWS = 3 * MR  # up to this many rows of A, B is read in place when it can be
WORK_FLOATS = KC * (NC + NR) + KC * MR  # packed B block, then the packed A micro-panel

I1, I32, I64, F32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()
PTR = ir.PointerType()
V16 = ir.VectorType(F32, 16)
_ZERO = ir.Constant(V16, [0.0] * 16)
_ARGS = [ctypes.c_int64] * 4 + [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] * 3 \
    + [ctypes.c_void_p, ctypes.c_int64]
_FN_TYPE = ctypes.CFUNCTYPE(None, *_ARGS)


def _i64(v: int) -> ir.Constant:
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
    return b.gep(ptr, [offset], inbounds=True, source_etype=F32)


def _smin(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def _vload(b, ptr):
    return b.load(ptr, typ=V16, align=4)


def _vstore(b, value, ptr):
    b.store(value, ptr, align=4)


# ---- micro-kernel ------------------------------------------------------------------------------

def _tile(module, fma, rows: int) -> ir.Function:
    """tile(kc, ap, bp, ldbp, c, ldc, ncols, accumulate): C[rows, :ncols] (+)= A[rows, :kc] @ P,
    A packed k-major (ap[k * MR + r]); P a kc x 32 panel with row stride ldbp, zero beyond
    ncols (packed, or B itself when it has no column tail)."""
    fnty = ir.FunctionType(ir.VoidType(), [I64, PTR, PTR, I64, PTR, I64, I64, I1])
    fn = ir.Function(module, fnty, f"hloc_sgemm_tile{rows}")
    fn.linkage = "internal"
    kc, ap, bp, ldbp, c, ldc, ncols, accumulate = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    buf = b.alloca(F32, size=rows * NR)
    accs = [b.alloca(V16) for _ in range(2 * rows)]
    full = b.icmp_signed("==", ncols, _i64(NR))
    # A column tail works on a zeroed stack tile holding C's first ncols columns.
    with _loop(b, 0, rows * NR, name="z") as i:
        b.store(ir.Constant(F32, 0.0), _at(b, buf, i))
    _copy_columns(b, rows, c, ldc, buf, _i64(NR), ncols, b.and_(accumulate, b.not_(full)))
    cp, ldcp = b.select(full, c, buf), b.select(full, ldc, _i64(NR))
    for r in range(rows):
        for h in range(2):
            old = _vload(b, _at(b, cp, b.add(b.mul(_i64(r), ldcp), _i64(16 * h))))
            b.store(b.select(accumulate, old, _ZERO), accs[2 * r + h])
    with _loop(b, 0, kc, name="k") as k:
        panel = [_vload(b, _at(b, bp, b.add(b.mul(k, ldbp), _i64(16 * h)))) for h in range(2)]
        for r in range(rows):
            x = b.load(_at(b, ap, b.add(b.mul(k, _i64(MR)), _i64(r))), typ=F32)
            splat = b.insert_element(ir.Constant(V16, ir.Undefined), x, _i64(0))
            splat = b.shuffle_vector(splat, ir.Constant(V16, ir.Undefined),
                                     ir.Constant(ir.VectorType(I32, 16), [0] * 16))
            for h in range(2):
                acc = b.load(accs[2 * r + h], typ=V16)
                b.store(b.call(fma, [splat, panel[h], acc]), accs[2 * r + h])
    for r in range(rows):
        for h in range(2):
            _vstore(b, b.load(accs[2 * r + h], typ=V16),
                    _at(b, cp, b.add(b.mul(_i64(r), ldcp), _i64(16 * h))))
    _copy_columns(b, rows, buf, _i64(NR), c, ldc, ncols, b.not_(full))
    b.ret_void()
    return fn


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


# ---- packing and the loop nest -----------------------------------------------------------------

def _pack(module) -> ir.Function:
    """pack(kc, nc, b, ldb, dst): B[:kc, :nc] as panels of 32 columns, zero-padded."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, I64, PTR]),
                     "hloc_sgemm_pack")
    fn.linkage = "internal"
    kc, nc, src, ldb, dst = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    last = b.sub(nc, _i64(1))
    full = b.sub(nc, b.srem(nc, _i64(NR)))
    with _loop(b, 0, full, NR, name="p") as p:  # whole panels: straight vector copies
        out = _at(b, dst, b.mul(p, kc))
        with _loop(b, 0, kc, name="pv") as k:
            row = _at(b, src, b.add(b.mul(k, ldb), p))
            for h in range(NR // 16):
                v = _vload(b, _at(b, row, _i64(16 * h)))
                _vstore(b, v, _at(b, out, b.add(b.mul(k, _i64(NR)), _i64(16 * h))))
    with _loop(b, full, nc, NR, name="p") as p:  # the column tail, zero-padded
        out = _at(b, dst, b.mul(p, kc))
        with _loop(b, 0, kc, name="pk") as k:
            row = _at(b, src, b.mul(k, ldb))
            for j in range(NR):
                col = b.add(p, _i64(j))
                v = b.load(_at(b, row, _smin(b, col, last)), typ=F32)
                v = b.select(b.icmp_signed("<", col, nc), v, ir.Constant(F32, 0.0))
                b.store(v, _at(b, out, b.add(b.mul(k, _i64(NR)), _i64(j))))
    b.ret_void()
    return fn


def _pack_a(module) -> ir.Function:
    """pack_a(kc, rows, a, lda, dst): dst[k * MR + r] = A[r, k]. Packed, the micro-kernel
    reads its MR broadcasts at fixed offsets from one pointer instead of MR row pointers
    (which spill registers the accumulators need)."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, I64, PTR]),
                     "hloc_sgemm_pack_a")
    fn.linkage = "internal"
    kc, rows, src, lda, dst = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with _loop(b, 0, rows, name="ar") as r:
        row = _at(b, src, b.mul(r, lda))
        with _loop(b, 0, kc, name="ak") as k:
            v = b.load(_at(b, row, k), typ=F32)
            b.store(v, _at(b, dst, b.add(b.mul(k, _i64(MR)), r)))
    b.ret_void()
    return fn


def _gemm(module, tiles, pack, pack_a) -> None:
    """hloc_sgemm(batch, m, n, k, a, sa, lda, b, sb, ldb, c, sc, ldc, work, beta):
    C (+)= A @ B per batch, adding to C's old values when beta is nonzero."""
    fnty = ir.FunctionType(ir.VoidType(), [I64] * 4 + [PTR, I64, I64] * 3 + [PTR, I64])
    fn = ir.Function(module, fnty, "hloc_sgemm")
    batch, m, n, k, a, sa, lda, bm, sb, ldb, c, sc, ldc, work, beta = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    a_work = _at(b, work, _i64(KC * (NC + NR)))
    # Equal k slices of at most KC: a short last slice would cost a full pass over C.
    slices = b.sdiv(b.add(k, _i64(KC - 1)), _i64(KC))
    kstep = b.sdiv(b.add(k, b.sub(slices, _i64(1))), slices)
    with _loop(b, 0, batch, name="bat") as t:
        a_t, b_t, c_t = (_at(b, p, b.mul(t, s)) for p, s in ((a, sa), (bm, sb), (c, sc)))
        with _loop(b, 0, n, NC, name="jc") as jc:
            nc = _smin(b, b.sub(n, jc), _i64(NC))
            # Pack B unless it needs no zero padding and is used by few row tiles or is one
            # contiguous block already (whole rows of B).
            direct = b.and_(b.or_(b.icmp_signed("<=", m, _i64(DIRECT_ROWS)),
                                  b.icmp_signed("==", ldb, nc)),
                            b.icmp_signed("==", b.srem(nc, _i64(NR)), _i64(0)))
            with _loop(b, 0, k, kstep, name="pc") as pc:
                kc = _smin(b, b.sub(k, pc), kstep)
                b_block = _at(b, b_t, b.add(b.mul(pc, ldb), jc))
                _call_unless(b, direct, pack, [kc, nc, b_block, ldb, work])
                accumulate = b.or_(b.icmp_signed(">", pc, _i64(0)),
                                   b.icmp_signed("!=", beta, _i64(0)))
                with _loop(b, 0, m, MR, name="ic") as ic:
                    rows = _smin(b, b.sub(m, ic), _i64(MR))
                    a_tile = _at(b, a_t, b.add(b.mul(ic, lda), pc))
                    b.call(pack_a, [kc, rows, a_tile, lda, a_work])
                    with _loop(b, 0, nc, NR, name="jr") as jr:
                        panel = b.select(direct, _at(b, b_block, jr), _at(b, work, b.mul(jr, kc)))
                        args = [kc, a_work, panel, b.select(direct, ldb, _i64(NR)),
                                _at(b, c_t, b.add(b.mul(ic, ldc), b.add(jc, jr))), ldc,
                                _smin(b, b.sub(nc, jr), _i64(NR)), accumulate]
                        _dispatch(b, rows, tiles, args)
    b.ret_void()


def _call_unless(b, skip, fn, args) -> None:
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
    cases = [fn.append_basic_block(f"rows{r}") for r in range(1, MR + 1)]
    switch = b.switch(rows, cases[-1])
    for r, block in enumerate(cases, start=1):
        switch.add_case(_i64(r), block)
        b.position_at_end(block)
        b.call(tiles[r - 1], args)
        b.branch(done)
    b.position_at_end(done)


def build_module() -> ir.Module:
    module = ir.Module("hloc_sgemm")
    fma = ir.Function(module, ir.FunctionType(V16, [V16] * 3), "llvm.fma.v16f32")
    tiles = [_tile(module, fma, r) for r in range(1, MR + 1)]
    _gemm(module, tiles, _pack(module), _pack_a(module))
    return module


# ---- loading and calling -----------------------------------------------------------------------

class _Library:
    """The compiled GEMM, loaded into this process, and one packing buffer per thread."""

    def __init__(self, module: ir.Module, work_floats: int, max_flops: float = float("inf"),
                 target=None):
        import llvmlite.binding as llvm_binding

        from ...codegen import llvm
        from ...codegen.target import host_target

        target = target or host_target()
        module.triple, module.data_layout = target.triple, target.data_layout
        text = str(module)
        key = cache_key(text, target.triple, target.cpu, target.features, "O3",
                        ".".join(map(str, llvm_binding.llvm_version_info)), __version__)
        obj = cached_object(key, lambda: llvm.compile_ir(text, target, 3).object_code, "gemm")
        self.library = llvm.JitLibrary(obj, target)
        self.fn = _FN_TYPE(self.library.address("hloc_sgemm"))
        self._local = threading.local()
        self.work_floats, self.max_flops = work_floats, max_flops

    def work(self) -> int:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = np.empty(self.work_floats + 16, np.float32)
        return buf.ctypes.data


# On AVX2 hosts the native GEMM serves the products that run on the calling thread, where its
# call overhead (a ctypes call, no thread hand-off) wins: a 200-step RNN of 32x256x256 products
# 27 ms against 38 through OpenBLAS. Bigger ones stay with OpenBLAS, whose Haswell kernels
# are faster there (1024^3: 45 ms against 58; 2 Zen 2 cores, minima of 15 alternating runs).
AVX2_MAX_FLOPS = 8000000


@functools.cache
def _library() -> _Library | None:
    from ...codegen import llvm

    choice = os.environ.get("HLOC_CPU_GEMM", "")
    if choice == "blas":  # compare against BLAS / work around
        return None
    features = llvm.host_cpu_features().split(",")
    if "+avx512f" in features and choice != "avx2":
        return _Library(build_module(), WORK_FLOATS)
    if "+avx2" in features and "+fma" in features:
        from ...codegen.cpu import gemm_avx2
        from ...codegen.target import cpu_target

        # HLOC_CPU_GEMM=avx2 on an AVX-512 host: what an AVX2 host runs (benchmarks' AVX2
        # mode), compiled for that level so LLVM cannot reach for EVEX-only registers.
        target = cpu_target("x86-64-v3") if choice == "avx2" else None
        return _Library(gemm_avx2.build_module(), gemm_avx2.AVX2.work_floats, AVX2_MAX_FLOPS,
                        target)
    return None


def _strides(x: np.ndarray) -> tuple[int, int] | None:
    """(batch stride, row stride) in elements of a [B, R, C] f32 view with unit column stride."""
    s = x.strides
    if (s[2] != 4 and x.shape[2] > 1) or any(v % 4 for v in s):
        return None
    return s[0] // 4, s[1] // 4


def _as3(x: np.ndarray) -> np.ndarray:
    return x if x.ndim == 3 else x[None]


def address(x: np.ndarray) -> int:
    """The address of an array's first element (cheaper than .ctypes.data)."""
    return x.__array_interface__["data"][0]


def native():
    """(hloc_sgemm as a ctypes function, this thread's work-buffer getter), or None."""
    lib = _library()
    return None if lib is None else (lib.fn, lib.work)


def sgemm_runner(ca, cb, co):
    """run(b0, b1, r0, r1, c0, c1) computing rows [r0, r1) x columns [c0, c1) of batches
    [b0, b1) of co.a = ca.a @ cb.a, for cells holding fixed-shape f32 views
    ([B,]M,K @ [B,]K,N; their strides depend only on the layout, the addresses may be
    rebound between runs). None where the native GEMM does not apply (no AVX2/AVX-512, another
    dtype, a non-unit column stride, an empty operand, a product too big for the AVX2 one)."""
    a, b, out = ca.a, cb.a, co.a
    if not (a.dtype == b.dtype == out.dtype == np.float32) or 0 in a.shape or 0 in b.shape:
        return None
    strides = [_strides(_as3(x)) for x in (a, b, out)]
    if None in strides or (lib := _library()) is None:
        return None
    (sa, lda), (sb, ldb), (sc, ldc) = strides
    k = a.shape[-1]
    if 2 * out.size * k > lib.max_flops:
        return None
    fn, work = lib.fn, lib.work

    def run(b0: int, b1: int, r0: int, r1: int, c0: int, c1: int) -> None:
        pa, pb, pc = address(ca.a), address(cb.a), address(co.a)
        fn(b1 - b0, r1 - r0, c1 - c0, k, pa + 4 * (b0 * sa + r0 * lda), sa, lda,
           pb + 4 * (b0 * sb + c0), sb, ldb, pc + 4 * (b0 * sc + r0 * ldc + c0), sc, ldc,
           work(), 0)
    return run


def pieces(batch: int, m: int, n: int, parts: int) -> list[tuple[int, ...]]:
    """(b0, b1, r0, r1, c0, c1) ranges cutting a product into about `parts` pieces: by batch,
    else by column blocks (each piece packs only its own columns of B), else by rows."""
    if batch >= parts or (batch > 1 and m * n < NC * NR):
        return [(lo, hi, 0, m, 0, n) for lo, hi in _split(batch, parts, 1)]
    out = []
    for b0 in range(batch):
        if n >= 4 * NR:
            out += [(b0, b0 + 1, 0, m, lo, hi) for lo, hi in _split(n, parts, 2 * NR)]
        else:
            out += [(b0, b0 + 1, lo, hi, 0, n) for lo, hi in _split(m, parts, 2 * MR)]
    return out


def _split(extent: int, parts: int, quantum: int) -> list[tuple[int, int]]:
    """[0, extent) in at most `parts` ranges whose bounds are multiples of `quantum`."""
    size = max(quantum, -(-extent // parts // quantum) * quantum)
    return [(lo, min(extent, lo + size)) for lo in range(0, extent, size)]
