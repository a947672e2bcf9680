"""One test per hardware rule the CUDA emulator models (emulate/ptxsem.py).

Each builds a one-operation kernel, runs it on the emulator and compares the result bits with
what an NVIDIA H200 (sm_90, driver 580) returned for the PTX instruction NVPTX emits for that
operation (one probe kernel per instruction). Each expectation differs from what x86 computes
for the same IR, so removing a rule fails its test. The last tests check the emitter's side:
the PTX of the samples that exposed these rules has no abs/neg instruction left to
canonicalize NaNs, and assembles for sm_80 and sm_90.
"""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

from hloc.bundle import read_bundle
from hloc.codegen.cuda import ptxas
from hloc.codegen.elemental.types import F32, I32

from .test_cuda_emulator import Kernel, run

pytestmark = pytest.mark.cpu

NAN = 0x7FC00000  # quiet NaN with a payload x86 keeps
CANON = 0x7FFFFFFF  # what the GPU returns instead
DEN = 0x000AE398  # an f32 subnormal
ONE, TWO = 0x3F800000, 0x40000000


def _emulate(op, a_bits, b_bits=None, out=np.uint32, ftz=True):
    """out[i] = op(ctx, builder, a[i], b[i]) on the emulator (f32 inputs given as bits)."""
    a = np.array(a_bits, np.uint32)
    b = np.array(b_bits if b_bits is not None else a_bits, np.uint32)
    res = np.zeros(len(a), out)

    def build(m):
        k = Kernel(m, "k", 3, threads=32)
        if not ftz:
            k.fn.attributes.discard('"denormal-fp-math-f32"="preserve-sign,preserve-sign"')
        i = k.nv.sreg64("tid")
        with k.b.if_then(k.b.icmp_signed("<", i, k.ctx.i64(len(a)))):
            x = k.b.load(k.ptr(0, i), typ=F32)
            y = k.b.load(k.ptr(1, i), typ=F32)
            r = op(k.ctx, k.b, x, y)
            k.b.store(r, k.b.gep(k.fn.args[2], [i], source_etype=r.type))
        k.done()

    run(build, ["k"], [("k", (1, 1, 1), (32, 1, 1), [a, b, res])])
    return [int(v) for v in res.view(np.uint32 if res.itemsize == 4 else res.dtype)]


def test_arithmetic_nan_is_canonical():
    got = _emulate(lambda c, b, x, y: b.fadd(x, y), [NAN, ONE, 0x7F800000], [ONE, NAN, 0xFF800000])
    assert got == [CANON, CANON, CANON]  # add.f32; x86: 0x7fc00000, 0x7fc00000, 0xffc00000


def test_sqrt_and_rounding_nan_is_canonical():
    got = _emulate(lambda c, b, x, y: c.call("llvm.roundeven.f32", [x]), [NAN, 0x3FC00000])
    assert got == [CANON, TWO]  # cvt.rni.f32.f32
    assert _emulate(lambda c, b, x, y: c.call("llvm.sqrt.f32", [x]), [0xBF800000]) == [CANON]


def test_fneg_fabs_are_neg_abs_ftz():
    neg = _emulate(lambda c, b, x, y: b.fneg(x), [NAN, DEN, 0x800AE398, ONE])
    assert neg == [CANON, 0x80000000, 0, 0xBF800000]  # neg.ftz.f32
    fabs = _emulate(lambda c, b, x, y: c.call("llvm.fabs.f32", [x]), [NAN, 0x800AE398])
    assert fabs == [CANON, 0]  # abs.ftz.f32


def test_fneg_without_ftz_keeps_subnormals():
    assert _emulate(lambda c, b, x, y: b.fneg(x), [DEN, NAN], ftz=False) == [0x800AE398, CANON]


def test_minnum_maxnum_are_min_max():
    a, b_ = [NAN, ONE, NAN, 0, 0x80000000], [ONE, NAN, 0x7F800002, 0x80000000, 0]
    got = _emulate(lambda c, b, x, y: c.call("llvm.minnum.f32", [x, y]), a, b_)
    assert got == [ONE, ONE, CANON, 0x80000000, 0x80000000]  # min.f32
    got = _emulate(lambda c, b, x, y: c.call("llvm.maxnum.f32", [x, y]), a, b_)
    assert got == [ONE, ONE, CANON, 0, 0]  # max.f32


def test_minimum_maximum_are_min_max_nan():
    got = _emulate(lambda c, b, x, y: c.call("llvm.maximum.f32", [x, y]), [NAN, ONE], [ONE, NAN])
    assert got == [CANON, CANON]  # max.NaN.f32; x86 keeps 0x7fc00000


def test_frem_is_nvptx_expansion():
    # fma(-trunc(x/y), y, x): -0 % 2 gives +0 (fmod: -0); 5.5 % 0 the canonical NaN.
    got = _emulate(lambda c, b, x, y: b.frem(x, y), [0x80000000, 0x40B00000, 0x40B00000],
                   [TWO, 0, 0x7F800000])
    assert got == [0, CANON, 0x40B00000]


def test_float_to_int_saturates():
    big, nbig = 0x4F32D05E, 0xCF32D05E  # ±3e9
    got = _emulate(lambda c, b, x, y: b.fptosi(x, I32), [NAN, big, nbig, 0x7F800000, 0xC0200000])
    assert got == [0, 0x7FFFFFFF, 0x80000000, 0x7FFFFFFF, 0xFFFFFFFE]  # cvt.rzi.s32.f32
    got = _emulate(lambda c, b, x, y: b.fptoui(x, I32), [NAN, big, 0xC0200000])
    assert got == [0, 0xB2D05E00, 0]  # cvt.rzi.u32.f32


def _int_op(name):
    return lambda c, b, x, y: getattr(b, name)(b.bitcast(x, I32), b.bitcast(y, I32))


@pytest.mark.parametrize("name", ["sdiv", "srem", "udiv", "urem"])
def test_division_by_zero_gives_all_ones(name):
    got = _emulate(_int_op(name), [7, 0xFFFFFFF9, 0], [0, 0, 0])
    assert got == [0xFFFFFFFF] * 3  # div/rem.{s,u}32 by 0; x86 traps


def test_int_min_by_minus_one():
    assert _emulate(_int_op("sdiv"), [0x80000000], [0xFFFFFFFF]) == [0x80000000]
    assert _emulate(_int_op("srem"), [0x80000000], [0xFFFFFFFF]) == [0]


def test_fptrunc_nan_is_canonical():
    def op(c, b, x, y):
        return b.bitcast(b.fptrunc(b.fpext(x, ir.DoubleType()), F32), I32)
    assert _emulate(op, [NAN, ONE]) == [CANON, ONE]  # cvt.rn.f32.f64 / cvt.f64.f32


def test_opaque_bit_move_is_a_bitcast():
    from hloc.codegen.elemental.nanbits import float_bits

    assert _emulate(lambda c, b, x, y: float_bits(c, x), [NAN, DEN]) == [NAN, DEN]


def test_other_inline_ptx_is_refused():
    from hloc.errors import UnsupportedError

    def op(c, b, x, y):
        asm = ir.InlineAsm(ir.FunctionType(I32, [F32]), "cvt.rni.s32.f32 $0, $1;", "=r,f")
        return b.call(asm, [x])
    with pytest.raises(UnsupportedError):
        _emulate(op, [ONE])


SIGN_SAMPLES = ["ops/maximum_nan", "ops/clamp_select", "ops/constants"]


@pytest.mark.parametrize("name", SIGN_SAMPLES)
def test_sample_ptx_has_no_nan_canonicalizing_sign_ops(name, tmp_path):
    """LLVM folds sign masks into fabs/fneg, whose abs/neg(.ftz) canonicalize NaN payloads
    and flush subnormals: the emitter must keep them out (nanbits.float_bits)."""
    from .test_cuda_samples import _bundle

    bundle = _bundle(name, tmp_path, archs=("sm_80", "sm_90"))
    for arch in ("sm_80", "sm_90"):
        ptx = bytes(bundle.members[f"kernels.{arch}.ptx"]).decode()
        lines = [ln.split()[0] for ln in ptx.splitlines() if ln.strip()]
        assert not [op for op in lines if op.startswith(("abs.f", "neg.f"))], arch
        if ptxas.find_ptxas():
            assert f"kernels.{arch}.cubin" in bundle.members


@pytest.mark.parametrize("dtype,ty", [(np.float32, "f32"), (np.float64, "f64")])
def test_cuda_remainder_is_exact_fmod(dtype, ty):
    """The emitter's integer fmod (elemental/fmod.py) against libm's, bit for bit, with the
    divisor flushed as XLA CPU's denormals-are-zero does (a subnormal divisor gives NaN; a
    subnormal dividend or result is kept): large quotients (where x - trunc(x/y)*y rounds),
    signed zeros, subnormals, inf and NaN."""
    from hloc.runtime.interpreter.numeric import flush_denormals

    from .support.run import emulate_hlo

    tiny = np.finfo(dtype).smallest_subnormal
    normal = np.finfo(dtype).tiny
    x = np.array([1e30, -1e30, -0.0, 5.5, -5.5, 3 * tiny, 7.0, np.inf, 1.0, np.nan, 1e-30,
                  123456.789, -0.0, 2.5, 3 * tiny, -1.0, 0.0, 1.02 * normal, 3 * tiny], dtype)
    y = np.array([3.3, 0.7, 2.0, 0.0, 2.0, 2 * tiny, np.inf, 1.0, np.nan, 3.0, 3e-31,
                  0.001, -1.0, -2.5, 1.0, 7 * tiny, -5 * tiny, normal, -normal], dtype)
    n = len(x)
    text = f"""HloModule m
ENTRY e {{
  a = {ty}[{n}] parameter(0)
  b = {ty}[{n}] parameter(1)
  ROOT r = {ty}[{n}] remainder(a, b)
}}"""
    got = np.asarray(emulate_hlo(text, [x, y])[0][0])
    with np.errstate(invalid="ignore"):
        want = np.fmod(x, flush_denormals(y))
    assert np.isnan(want[[5, 15, 16]]).all() and want[17] != 0 and want[14] == 3 * tiny
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert got[~nan].tobytes() == want[~nan].tobytes()


def test_min_max_against_a_constant_test_the_nan_operand_explicitly(tmp_path):
    """clamp(-1, x, 2): with a constant bound the sign masks fold away and the select has the
    shape ptxas turns into FMNMX, which returns the bound for a NaN x (seen on an H200). The
    emitter tests the non-constant operand for NaN itself: one setp.nan per min and max."""
    from .support.bundles import compile_bundle

    text = ("HloModule c\n\nENTRY e {\n  x = f32[8]{0} parameter(0)\n"
            "  m = f32[] constant(-1)\n  p = f32[] constant(2)\n"
            "  lo = f32[8]{0} broadcast(m), dimensions={}\n"
            "  hi = f32[8]{0} broadcast(p), dimensions={}\n"
            "  ROOT c = f32[8]{0} clamp(lo, x, hi)\n}\n")
    bundle = compile_bundle(text, tmp_path / "c.bundle", target="cuda", cuda_archs=("sm_90",))
    ptx = read_bundle(str(bundle)).members["kernels.sm_90.ptx"]
    assert bytes(ptx).decode().count("setp.nan") >= 2
