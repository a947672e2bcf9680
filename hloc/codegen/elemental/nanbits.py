"""Exact sign bits and NaN payloads on targets whose hardware canonicalizes NaNs (CUDA).

The samples' expected outputs are XLA CPU's, computed by x86 SSE: an operation on a NaN
returns the first NaN operand made quiet, an invalid operation (0 * inf, sqrt(-1), x % 0)
returns the "default NaN" 0xffc00000, and abs/negate only touch the sign bit. NVIDIA GPUs
differ (measured on an H200, see tests/test_cuda_emulator_rules.py): every f32 arithmetic,
rounding (`cvt.rni` ...) and `abs`/`neg` result that is NaN is the canonical 0x7fffffff,
and `abs.ftz`/`neg.ftz` flush subnormals. Worse, LLVM's InstCombine turns integer sign
masking of a float's bits (`and (bitcast x), 0x7fffffff`) back into `llvm.fabs`, which
NVPTX lowers to `abs.ftz.f32`, so writing the bit operation is not enough.

On such targets (`CudaTarget.canonical_nan`) this module:
- reads a float's bits through an opaque `mov.b32` (inline PTX), so no fold can see that
  the integer came from a float (the emulator knows that instruction: emulate/ptxsem.py);
- picks NaN results explicitly (`x86_nan`), the way SSE does.
On other targets every helper is the plain LLVM operation.
"""

from __future__ import annotations

from llvmlite import ir

from .types import F64

_DEFAULT_NAN = {32: 0xFFC00000, 64: 0xFFF8000000000000}  # x86's "QNaN floating-point indefinite"
_QUIET_BIT = {32: 1 << 22, 64: 1 << 51}


def exact_nans(ctx) -> bool:
    """True when the target's NaN results and sign operations need the explicit forms."""
    return bool(getattr(ctx.target, "canonical_nan", False))


def int_type(x: ir.Value) -> ir.IntType:
    return ir.IntType(64 if x.type == F64 else 32)


def float_bits(ctx, x: ir.Value) -> ir.Value:
    """The bits of float `x` as an integer, opaque to LLVM's float folds on CUDA."""
    ity = int_type(x)
    if not exact_nans(ctx):
        return ctx.builder.bitcast(x, ity)
    width = ity.width
    asm = ir.InlineAsm(ir.FunctionType(ity, [x.type]), f"mov.b{width} $0, $1;",
                       "=l,d" if width == 64 else "=r,f")
    return ctx.builder.call(asm, [x])


def from_bits(ctx, bits: ir.Value, like: ir.Value) -> ir.Value:
    return ctx.builder.bitcast(bits, like.type)


def negate(ctx, x: ir.Value) -> ir.Value:
    """-x as a sign-bit flip (XLA negate: no flush, NaN payload kept)."""
    if not exact_nans(ctx):
        return ctx.builder.fneg(x)
    ity = int_type(x)
    return from_bits(ctx, ctx.builder.xor(float_bits(ctx, x), ir.Constant(ity, 1 << (ity.width - 1))), x)


def absolute(ctx, x: ir.Value) -> ir.Value:
    """|x| as a sign-bit clear (XLA abs: no flush, NaN payload kept)."""
    if not exact_nans(ctx):
        return ctx.call(f"llvm.fabs.{'f64' if x.type == F64 else 'f32'}", [x])
    ity = int_type(x)
    mask = ir.Constant(ity, (1 << (ity.width - 1)) - 1)
    return from_bits(ctx, ctx.builder.and_(float_bits(ctx, x), mask), x)


def quiet(ctx, x: ir.Value) -> ir.Value:
    """NaN `x` with its quiet bit set (what SSE returns for a NaN operand)."""
    ity = int_type(x)
    bits = ctx.builder.or_(float_bits(ctx, x), ir.Constant(ity, _QUIET_BIT[ity.width]))
    return from_bits(ctx, bits, x)


def default_nan(x: ir.Value) -> ir.Constant:
    ity = int_type(x)
    return ir.Constant(ity, _DEFAULT_NAN[ity.width]).bitcast(x.type)


def x86_nan(ctx, result: ir.Value, *operands: ir.Value) -> ir.Value:
    """`result`, or where it is NaN, the NaN SSE would return: the first NaN operand made
    quiet, else the default NaN. Identity on targets that compute this themselves."""
    if not exact_nans(ctx):
        return result
    b = ctx.builder
    nan = default_nan(result)
    for x in reversed(operands):
        nan = b.select(b.fcmp_unordered("uno", x, x), quiet(ctx, x), nan)
    return b.select(b.fcmp_unordered("uno", result, result), nan, result)
