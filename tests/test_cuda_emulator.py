"""The CUDA emulator on hand-written kernels: thread indices, shared memory, barriers
(also inside loops), every warp-shuffle mode, and the detection of divergent barriers."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

from hloc.codegen.cuda.emulate import EmulatedLibrary, build_host_ir, compile_for_host
from hloc.codegen.cuda.nvvm import Nvvm, kernel_function
from hloc.codegen.cuda.target import cuda_target
from hloc.codegen.elemental.context import EmitContext
from hloc.codegen.elemental.types import F32, I32, I64
from hloc.errors import CheckFailed
from hloc.runtime.openblas import fortran

from .support.run import emulate_hlo
from .support.values import assert_close

pytestmark = pytest.mark.cpu


class Kernel:
    """A kernel under construction (test helper)."""

    def __init__(self, module, name, nargs, threads=256):
        self.fn = kernel_function(module, name, nargs, threads)
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.nv = Nvvm(module, self.b, name)
        self.ctx = EmitContext(module, self.b, cuda_target())

    def ptr(self, arg, i, ty=F32):
        return self.b.gep(self.fn.args[arg], [i], source_etype=ty)

    def done(self):
        self.b.ret_void()
        self.nv.finish()


def run(build, names, launches):
    module = ir.Module("t")
    module.triple = "nvptx64-nvidia-cuda"
    build(module)
    host = build_host_ir(module, names)
    lib = EmulatedLibrary(compile_for_host(host), host.kernels)
    for name, grid, block, arrays in launches:
        lib.launch(name, grid, block, [a.ctypes.data for a in arrays])
    return host


def test_vector_add_over_blocks():
    def build(m):
        k = Kernel(m, "vadd", 3)
        i = k.b.add(k.b.mul(k.nv.sreg64("ctaid"), k.nv.sreg64("ntid")), k.nv.sreg64("tid"))
        with k.b.if_then(k.b.icmp_signed("<", i, k.ctx.i64(1000))):
            x = k.b.load(k.ptr(0, i), typ=F32)
            y = k.b.load(k.ptr(1, i), typ=F32)
            k.b.store(k.b.fadd(x, y), k.ptr(2, i))
        k.done()

    a, b = np.random.rand(1000).astype(np.float32), np.random.rand(1000).astype(np.float32)
    out = np.zeros(1000, np.float32)
    host = run(build, ["vadd"], [("vadd", (4, 1, 1), (256, 1, 1), [a, b, out])])
    assert host.kernels["vadd"].sync_points == 0
    np.testing.assert_array_equal(out, a + b)


def test_shared_memory_tree_with_barrier_in_a_loop():
    """for s = 128; s > 0; s /= 2: if tid < s: sh[tid] += sh[tid + s]; barrier."""

    def build(m):
        k = Kernel(m, "tree", 2)
        b, ctx = k.b, k.ctx
        tid, row = k.nv.sreg64("tid"), k.nv.sreg64("ctaid")
        sh = k.nv.shared(F32, 256, 4)
        b.store(b.load(k.ptr(0, b.add(b.mul(row, ctx.i64(256)), tid)), typ=F32),
                b.gep(sh, [tid], source_etype=F32))
        k.nv.barrier()
        head, body, end = (b.append_basic_block(n) for n in ("h", "body", "end"))
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        s = b.phi(I64)
        s.add_incoming(ctx.i64(128), pre)
        b.cbranch(b.icmp_signed(">", s, ctx.i64(0)), body, end)
        b.position_at_end(body)
        with b.if_then(b.icmp_signed("<", tid, s)):
            mine = b.gep(sh, [tid], source_etype=F32)
            other = b.gep(sh, [b.add(tid, s)], source_etype=F32)
            b.store(b.fadd(b.load(mine, typ=F32), b.load(other, typ=F32)), mine)
        k.nv.barrier()
        s.add_incoming(b.lshr(s, ctx.i64(1)), b.block)
        b.branch(head)
        b.position_at_end(end)
        with b.if_then(b.icmp_signed("==", tid, ctx.i64(0))):
            b.store(b.load(sh, typ=F32), k.ptr(1, row))
        k.done()

    x = np.random.rand(7, 256).astype(np.float32)
    out = np.zeros(7, np.float32)
    host = run(build, ["tree"], [("tree", (7, 1, 1), (256, 1, 1), [x, out])])
    assert host.kernels["tree"].sync_points == 2
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5)


def _lane_model(mode: str, lane: int, operand: int, width: int = 32) -> int:
    seg = lane & ~(width - 1)
    if mode == "down":
        j = lane + operand
        return j if j < seg + width else lane
    if mode == "up":
        j = lane - operand
        return j if j >= seg else lane
    if mode == "bfly":
        j = lane ^ operand
        return j if j < seg + width else lane
    return seg + (operand & (width - 1))


@pytest.mark.parametrize("mode,operand,width", [("down", 3, 32), ("down", 16, 32), ("up", 5, 32),
                                                ("bfly", 6, 32), ("idx", 9, 32), ("down", 2, 8),
                                                ("bfly", 1, 16)])
def test_shuffle_modes_follow_ptx(mode, operand, width):
    def build(m):
        k = Kernel(m, "shfl", 2, 64)
        b = k.b
        tid = k.nv.sreg64("tid")
        v = b.load(b.gep(k.fn.args[0], [tid], source_etype=I32), typ=I32)
        moved = k.nv.shuffle(mode, v, operand, width)
        b.store(moved, b.gep(k.fn.args[1], [tid], source_etype=I32))
        k.done()

    src = (np.arange(64, dtype=np.int32) * 7 + 1)
    out = np.zeros(64, np.int32)
    run(build, ["shfl"], [("shfl", (1, 1, 1), (64, 1, 1), [src, out])])
    want = [src[(t & ~31) + _lane_model(mode, t & 31, operand, width)] for t in range(64)]
    np.testing.assert_array_equal(out, want)


def test_warp_sum_of_doubles_and_bytes():
    def build(m):
        k = Kernel(m, "wsum", 2, 32)
        b = k.b
        tid = k.nv.sreg64("tid")
        v = b.load(b.gep(k.fn.args[0], [tid], source_etype=ir.DoubleType()), typ=ir.DoubleType())
        for d in (16, 8, 4, 2, 1):
            v = b.fadd(v, k.nv.shuffle("down", v, d))
        with b.if_then(b.icmp_signed("==", tid, k.ctx.i64(0))):
            b.store(v, k.fn.args[1])
        k.done()

    x = np.random.rand(32)
    out = np.zeros(1)
    run(build, ["wsum"], [("wsum", (1, 1, 1), (32, 1, 1), [x, out])])
    assert out[0] == pytest.approx(x.sum(), rel=1e-12)


def test_divergent_barrier_is_reported():
    def build(m):
        k = Kernel(m, "bad", 1, 64)
        b = k.b
        with b.if_then(b.icmp_signed("<", k.nv.sreg64("tid"), k.ctx.i64(32))):
            k.nv.barrier()
        k.nv.barrier()
        k.done()

    with pytest.raises(CheckFailed, match="different barriers|finished while others"):
        run(build, ["bad"], [("bad", (1, 1, 1), (64, 1, 1), [np.zeros(1)])])


def test_three_dimensional_indices():
    def build(m):
        k = Kernel(m, "ids", 1, 64)
        b, nv = k.b, k.nv
        x, y, z = (nv.sreg64("tid", a) for a in "xyz")
        bx, by = nv.sreg64("ctaid", "x"), nv.sreg64("ctaid", "y")
        block = b.add(bx, b.mul(by, nv.sreg64("nctaid", "x")))
        local = b.add(x, b.mul(nv.sreg64("ntid", "x"), b.add(y, b.mul(nv.sreg64("ntid", "y"), z))))
        flat = b.add(b.mul(block, k.ctx.i64(24)), local)
        b.store(b.trunc(flat, I32), b.gep(k.fn.args[0], [flat], source_etype=I32))
        k.done()

    out = np.full(24 * 6, -1, np.int32)
    run(build, ["ids"], [("ids", (3, 2, 1), (4, 3, 2), [out])])
    np.testing.assert_array_equal(out, np.arange(24 * 6))


def test_lapack_host_thunks_call_lapack():
    """A LAPACK custom call on the CUDA path runs on the host through LAPACK, as the CPU
    runtime does (not the interpreter's f64 reference): batched LU, pivots and status as
    the interpreter's."""
    if fortran("sgetrf") is None:
        pytest.skip("numpy's OpenBLAS has no LAPACK here")
    text = """HloModule m
ENTRY e {
  a = f32[64,3,3] parameter(0)
  ROOT lu = (f32[64,3,3], s32[64,3], s32[64]) custom-call(a), custom_call_target="lapack_sgetrf_ffi", api_version=API_VERSION_TYPED_FFI
}"""
    a = np.random.default_rng(3).standard_normal((64, 3, 3)).astype(np.float32)
    a[5] = 0.0  # singular: status 1
    got, want, ex = emulate_hlo(text, [a])
    assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    assert got[2][5] == 1
    assert ex.runner.host_impls["lu"].__module__ == "hloc.runtime.lapack"
