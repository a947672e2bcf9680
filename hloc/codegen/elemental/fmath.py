"""FMath: float helpers for building math functions in llvmlite IR, for one float type."""

from __future__ import annotations

from llvmlite import ir

from .types import F32, F64, I32, I64


class FMath:
    """Float helpers for one LLVM float type (float or double)."""

    def __init__(self, ctx, ty: ir.Type = F32):
        self.ctx = ctx
        self.b = ctx.builder
        self.ty = ty
        self.ity = I64 if ty == F64 else I32
        self.sfx = "f64" if ty == F64 else "f32"

    def c(self, v: float) -> ir.Constant:
        return ir.Constant(self.ty, v)

    def ic(self, v: int) -> ir.Constant:
        return ir.Constant(self.ity, v)

    def add(self, x, y):
        return self.b.fadd(x, y)

    def sub(self, x, y):
        return self.b.fsub(x, y)

    def mul(self, x, y):
        return self.b.fmul(x, y)

    def div(self, x, y):
        return self.b.fdiv(x, y)

    def fma(self, x, y, z):
        """x*y + z, fused where the target has FMA (llvm.fmuladd never calls libm)."""
        return self.ctx.call(f"llvm.fmuladd.{self.sfx}", [x, y, z])

    def poly(self, x, coeffs) -> ir.Value:
        """coeffs[0] + coeffs[1]*x + ... by Horner's rule."""
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k))
        return acc

    def intrinsic(self, name: str, *args):
        return self.ctx.call(f"llvm.{name}.{self.sfx}", list(args))

    def abs(self, x):
        return self.intrinsic("fabs", x)

    def copysign(self, mag, sign):
        return self.intrinsic("copysign", mag, sign)

    def lt(self, x, y):
        return self.b.fcmp_ordered("<", x, y)

    def gt(self, x, y):
        return self.b.fcmp_ordered(">", x, y)

    def le(self, x, y):
        return self.b.fcmp_ordered("<=", x, y)

    def eq(self, x, y):
        return self.b.fcmp_ordered("==", x, y)

    def isnan(self, x):
        return self.b.fcmp_unordered("uno", x, x)

    def sel(self, c, x, y):
        return self.b.select(c, x, y)

    def bits(self, x):
        return self.b.bitcast(x, self.ity)

    def from_bits(self, i):
        return self.b.bitcast(i, self.ty)

    def to_int(self, x):
        """Float → int for integral-valued x; NaN and huge values become 0, never poison.

        (A plain fptosi on a sanitized value vectorizes; LLVM scalarizes fptosi.sat.)
        """
        limit = self.c(float(2 ** (self.ity.width - 2)))
        safe = self.sel(self.lt(self.abs(x), limit), x, self.c(0.0))
        return self.b.fptosi(safe, self.ity)

    def daz(self, x):
        """Denormals read as ±0 (what the hardware does with DAZ set, made explicit)."""
        tiny = 2.2250738585072014e-308 if self.ty == F64 else 1.1754943508222875e-38
        return self.sel(self.lt(self.abs(x), self.c(tiny)), self.copysign(self.c(0.0), x), x)

    def pow2(self, n):
        """2**n for an integer n within the normal exponent range."""
        mant = 52 if self.ty == F64 else 23
        bias = 1023 if self.ty == F64 else 127
        return self.from_bits(self.b.shl(self.b.add(n, self.ic(bias)), self.ic(mant)))

    def scale(self, x, n):
        """x * 2**n in two steps, so n may exceed the exponent range by up to its size."""
        half = self.b.ashr(n, self.ic(1))
        return self.mul(self.mul(x, self.pow2(half)), self.pow2(self.b.sub(n, half)))
