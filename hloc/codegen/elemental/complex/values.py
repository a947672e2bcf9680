"""Complex values in LLVM IR: a {re, im} struct of f32 (c64) or f64 (c128).

`Cx` takes complex values apart and puts them together, and gives the float functions the
complex formulas need for their parts: f32 uses the vectorizable approximations of approx.py;
f64 calls libm on the CPU and has no lowering elsewhere (like real f64 math, mathfn.py).
Every helper takes and returns register values; nothing here is boxed for real types.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ....errors import UnsupportedError
from ....ir import PrimitiveType as P
from .. import approx, nanbits
from ..fmath import FMath
from ..types import F32, F64, ElemType, elem_type
from . import ir as complex_ir

# Part functions: name -> its f32 approximation, approx(ctx, *operands) (f64 calls libm `name`).
_F32_FUNCTIONS: dict[str, Callable[..., ir.Value]] = {
    "exp": approx.exp_f32, "expm1": approx.expm1_f32, "log": approx.log_f32,
    "log1p": approx.log1p_f32, "sin": approx.sin_f32, "cos": approx.cos_f32,
    "tan": approx.tan_f32, "atan2": approx.atan2_f32, "cbrt": approx.cbrt_f32,
}


class Cx(FMath):
    """Complex helpers for one complex type (FMath's float helpers act on its parts)."""

    def __init__(self, ctx, et: ElemType):
        super().__init__(ctx, et.part.value_type)
        self.et = et

    # ---- parts ------------------------------------------------------------------------------
    def parts(self, z: ir.Value) -> tuple[ir.Value, ir.Value]:
        return complex_ir.parts(self.b, z)

    def make(self, re: ir.Value, im: ir.Value) -> ir.Value:
        return complex_ir.pair(self.b, self.et.value_type, re, im)

    def const(self, re: float, im: float = 0.0) -> ir.Constant:
        return ir.Constant(self.et.value_type, [self.c(re), self.c(im)])

    def select(self, cond: ir.Value, z: ir.Value, w: ir.Value) -> ir.Value:
        """Part-wise select (keeps struct-typed selects out of vectorizable loops)."""
        (zr, zi), (wr, wi) = self.parts(z), self.parts(w)
        return self.make(self.sel(cond, zr, wr), self.sel(cond, zi, wi))

    # ---- float helpers on parts ---------------------------------------------------------------
    def neg(self, x):
        # A sign flip, never `fneg`: on CUDA that is neg.ftz, which flushes subnormal parts.
        return nanbits.negate(self.ctx, x)

    def ge(self, x, y):
        return self.b.fcmp_ordered(">=", x, y)

    def ne_unordered(self, x, y):
        return self.b.fcmp_unordered("!=", x, y)

    def is_inf(self, x):
        return self.eq(self.abs(x), self.c(float("inf")))

    def is_finite(self, x):
        return self.lt(self.abs(x), self.c(float("inf")))

    def either_nan(self, x, y):
        return self.b.fcmp_unordered("uno", x, y)

    def sqrt(self, x):
        return self.intrinsic("sqrt", x)

    def fmax_nan(self, x, y):
        """max that returns NaN if either operand is NaN (llvm.maximum)."""
        return self.intrinsic("maximum", x, y)

    def fmin_nan(self, x, y):
        return self.intrinsic("minimum", x, y)

    def fn(self, name: str, *args: ir.Value) -> ir.Value:
        """Float function `name` (exp, log, sin, ...) of the part type."""
        if self.ty != F64:
            return _F32_FUNCTIONS[name](self.ctx, *args)
        if self.ctx.target_kind != "cpu":
            raise UnsupportedError(f"{self.et.ptype.name.lower()} needs f64 {name}, which has no "
                                   f"lowering for target '{self.ctx.target_kind}'")
        # libm tests operand bits itself: hand it the zero that DAZ would read.
        return self.ctx.call(name, [self.daz(a) for a in args])

    # ---- c64 in f64 ---------------------------------------------------------------------------
    @property
    def is_wide(self) -> bool:
        return self.ty == F64

    def wide(self) -> Cx:
        """Helpers for c128 (itself for c128): c64 formulas run there when f64 arithmetic
        (exact squares of f32 parts, no overflow) makes them simple and accurate."""
        return self if self.is_wide else Cx(self.ctx, elem_type(P.C128, complex_ok=True))

    def widen(self, x: ir.Value) -> ir.Value:
        return x if self.is_wide else self.b.fpext(x, F64)

    def narrow(self, x: ir.Value) -> ir.Value:
        return x if self.is_wide else self.b.fptrunc(x, F32)
