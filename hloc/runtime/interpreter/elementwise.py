"""Elementwise arithmetic: add ... power, negate/abs/sign, select, clamp, complex parts, map.

Semantics follow XLA CPU: integer arithmetic wraps; x/0 is -1 (all ones) and x%0 is x;
INT_MIN/-1 is INT_MIN and INT_MIN%-1 is 0; integer power uses the exponent's low 6 bits;
float maximum/minimum propagate NaN and order -0 < +0; low-precision floats are computed in
f32 and rounded once; f32/f64 denormals are flushed (numeric.py has the details).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import UnsupportedError
from ...ir import Opcode
from ...ir.opcodes import ELEMENTWISE
from ...util.record import dataclass
from . import libm
from . import numeric as nm
from .registry import impl


@dataclass(frozen=True)
class ArithRule:
    """How one elementwise opcode computes on each element kind (None: not defined there,
    which raises UnsupportedError).

    Integer functions receive the operands (sub-byte types widened to int64) and the result
    dtype; the caller wraps their result modulo 2**bits.
    """

    float_fn: Callable | None
    int_fn: Callable | None
    pred_fn: Callable | None = None
    complex_fn: Callable | None = None
    precise: bool = False  # compute f32 in f64 (transcendental accuracy)
    daz: bool = True  # denormal operands read as ±0 (off for bit operations)
    ftz: bool = True  # denormal results flushed to ±0 (off for bit operations)
    post: Callable | None = None  # fix-up of float results (e.g. NaN bit patterns)


def apply_rule(rule: ArithRule, instr, ops: list[np.ndarray], out_dt=None) -> np.ndarray:
    """Dispatch `rule` on the element kind of the first operand."""
    out_dt = np.dtype(out_dt if out_dt is not None else instr.shape.np_dtype)
    kind = nm.info(ops[0].dtype).kind
    if kind == "pred" and rule.pred_fn is not None:
        with np.errstate(all="ignore"):
            return nm.as_array(rule.pred_fn(*ops), out_dt)
    if kind in ("int", "uint") and rule.int_fn is not None:
        return nm.int_op(lambda *a: rule.int_fn(*a, out_dt), ops, out_dt)
    if kind == "complex" and rule.complex_fn is not None:
        return nm.float_op(rule.complex_fn, ops, out_dt, precise=rule.precise, daz=rule.daz,
                           ftz=rule.ftz)
    if kind == "float" and rule.float_fn is not None:
        result = nm.float_op(rule.float_fn, ops, out_dt, precise=rule.precise, daz=rule.daz,
                             ftz=rule.ftz)
        return result if rule.post is None else rule.post(result)
    raise UnsupportedError(
        f"{instr.opcode.value} is not defined for {nm.info(ops[0].dtype).name} operands "
        f"(instruction %{instr.name})")


# ---- float helpers --------------------------------------------------------------------------

def float_max(x, y):
    """IEEE maximum (NaN wins, +0 > -0) with XLA CPU's NaN bits.

    A NaN x comes back as is; a NaN y (x not NaN) comes back with its sign bit ANDed with x's.
    """
    with np.errstate(invalid="ignore"):
        both_zero = (x == 0) & (y == 0)
        result = np.where(both_zero, np.where(np.signbit(x), y, x), np.where(x > y, x, y))
        y_nan = np.where(np.signbit(x) & np.signbit(y), y, np.abs(y))
        return np.where(np.isnan(x), x, np.where(np.isnan(y), y_nan, result))


def float_min(x, y):
    """IEEE minimum (NaN wins, -0 < +0) with XLA CPU's NaN bits.

    A NaN x comes back as is; a NaN y (x not NaN) comes back with its sign bit ORed with x's.
    """
    with np.errstate(invalid="ignore"):
        both_zero = (x == 0) & (y == 0)
        result = np.where(both_zero, np.where(np.signbit(x), x, y), np.where(x < y, x, y))
        y_nan = np.where(np.signbit(x) | np.signbit(y), -np.abs(y), y)
        return np.where(np.isnan(x), x, np.where(np.isnan(y), y_nan, result))


def _canonical_f16_nan(x: np.ndarray) -> np.ndarray:
    """XLA CPU's f16 maximum/minimum/clamp return the positive quiet NaN 0x7e00."""
    if x.dtype != np.dtype(np.float16):
        return x
    return np.where(np.isnan(x), np.array(0x7E00, np.uint16).view(np.float16), x)


def _float_remainder(x, y):
    # XLA CPU's fmod is exact bit arithmetic on x; only the divisor goes through a flushing
    # FP compare (a denormal divisor gives NaN like a zero one).
    return np.fmod(x, nm.flush_denormals(y))


def _float_sign(x):
    keep = np.isnan(x) | (x == 0)  # NaN and ±0 come back unchanged
    return np.where(keep, x, np.copysign(np.ones_like(x), x))


def _complex_power(a, b):
    wide = np.power(a.astype(np.complex128), b.astype(np.complex128))
    return wide.astype(a.dtype)


def _complex_abs(z):
    # XLA computes max * sqrt(1 + (min/max)**2): a NaN part wins even over an infinite one.
    nan = np.isnan(z.real) | np.isnan(z.imag)
    return np.where(nan, np.nan, np.abs(z))


def _complex_sign(z):
    mag = np.abs(z)
    return np.where(mag == 0, np.zeros_like(z), z / np.where(mag == 0, 1, mag))


# ---- integer helpers ------------------------------------------------------------------------

def _all_ones(dt) -> int:
    """The numeric value of the all-ones bit pattern of integer type `dt`."""
    return -1 if nm.info(dt).is_signed_int else nm.int_limits(dt)[1]


def _int_divide(a, b, dt):
    lo, _ = nm.int_limits(dt)
    zero = b == 0
    overflow = (a == lo) & (b == -1) if lo < 0 else np.zeros_like(zero)
    safe_b = np.where(zero | overflow, 1, b).astype(b.dtype)
    # a - fmod(a, b) is an exact multiple of b that never overflows: truncating division.
    q = (a - np.fmod(a, safe_b)) // safe_b
    q = np.where(overflow, a, q)
    return np.where(zero, np.array(_all_ones(dt)).astype(q.dtype), q)


def _int_remainder(a, b, dt):
    lo, _ = nm.int_limits(dt)
    zero = b == 0
    overflow = (a == lo) & (b == -1) if lo < 0 else np.zeros_like(zero)
    safe_b = np.where(zero | overflow, 1, b).astype(b.dtype)
    r = np.where(overflow, 0, np.fmod(a, safe_b))
    return np.where(zero, a, r)


def _int_power(base, exp, dt):
    """XLA's integer power: square-and-multiply over the exponent's low 6 bits.

    A negative exponent gives 1 for base 1, ±1 for base all-ones (by the exponent's parity)
    and 0 otherwise. "Negative" means the sign bit of the storage byte(s) is set: for u8..u64
    that includes exponents >= 2**(bits-1); u4/u2 sit zero-extended in a byte, so never.
    """
    lo, hi = nm.int_limits(dt)
    if lo < 0:
        negative = exp < 0
    elif nm.bits_of(dt) >= 8:
        negative = exp > hi // 2
    else:
        negative = np.zeros(np.shape(exp), bool)
    acc = np.ones_like(base)
    b = base.copy()
    e = np.asarray(exp) & 63
    for _ in range(6):
        acc = np.where((e & 1) == 1, acc * b, acc)
        b = b * b
        e = e >> 1
    minus_one = base == np.array(_all_ones(dt)).astype(base.dtype)
    odd = (np.asarray(exp) & 1) == 1
    neg_result = np.where(base == 1, 1, np.where(minus_one, np.where(odd, base, 1), 0))
    return np.where(negative, neg_result.astype(acc.dtype), acc)


BINARY_RULES: dict[Opcode, ArithRule] = {
    Opcode.ADD: ArithRule(np.add, lambda a, b, dt: a + b, np.logical_or, np.add),
    Opcode.SUBTRACT: ArithRule(np.subtract, lambda a, b, dt: a - b, None, np.subtract),
    Opcode.MULTIPLY: ArithRule(np.multiply, lambda a, b, dt: a * b, np.logical_and,
                               np.multiply),
    Opcode.DIVIDE: ArithRule(np.divide, _int_divide, None, np.divide),
    Opcode.REMAINDER: ArithRule(_float_remainder, _int_remainder, daz=False, ftz=False),
    Opcode.MAXIMUM: ArithRule(float_max, lambda a, b, dt: np.maximum(a, b), np.logical_or,
                              post=_canonical_f16_nan),
    Opcode.MINIMUM: ArithRule(float_min, lambda a, b, dt: np.minimum(a, b), np.logical_and,
                              post=_canonical_f16_nan),
    # libm's pow tests the operands' bits itself (see libm.power); its result is flushed.
    # (libm.power computes in f64 itself; complex pow goes through c128.)
    Opcode.POWER: ArithRule(libm.power, _int_power, complex_fn=_complex_power, daz=False),
}

UNARY_RULES: dict[Opcode, ArithRule] = {
    # negate and abs only touch the sign bit: denormals survive.
    Opcode.NEGATE: ArithRule(np.negative, lambda a, dt: -a, complex_fn=np.negative, daz=False,
                             ftz=False),
    Opcode.ABS: ArithRule(np.abs, lambda a, dt: np.abs(a) if nm.info(dt).is_signed_int else a,
                          daz=False, ftz=False),
    Opcode.SIGN: ArithRule(_float_sign, lambda a, dt: np.sign(a), complex_fn=_complex_sign),
}


@impl(*BINARY_RULES)
def binary_arith(ctx, instr, ops):
    a, b = np.broadcast_arrays(*ops)
    return apply_rule(BINARY_RULES[instr.opcode], instr, [a, b])


# Complex abs is arithmetic (denormals flushed), unlike the sign-bit-only real abs.
_COMPLEX_ABS = ArithRule(None, None, complex_fn=_complex_abs, precise=True)


@impl(*UNARY_RULES)
def unary_arith(ctx, instr, ops):
    if instr.opcode == Opcode.ABS and nm.is_complex(ops[0].dtype):
        return apply_rule(_COMPLEX_ABS, instr, ops)
    return apply_rule(UNARY_RULES[instr.opcode], instr, ops)


# ---- select, clamp, complex parts -----------------------------------------------------------

@impl(Opcode.SELECT)
def select(ctx, instr, ops):
    pred, on_true, on_false = ops
    # A scalar predicate selects whole operands (older HLO allows it); numpy broadcasts.
    return nm.as_array(np.where(pred.astype(bool), on_true, on_false), instr.shape.np_dtype)


# min(max(lo, x), hi) in this operand order: it decides which NaN bits come out.
_CLAMP = ArithRule(lambda lo, x, hi: float_min(float_max(lo, x), hi),
                   lambda lo, x, hi, dt: np.minimum(np.maximum(lo, x), hi),
                   lambda lo, x, hi: np.logical_and(np.logical_or(lo, x), hi),
                   post=_canonical_f16_nan)


@impl(Opcode.CLAMP)
def clamp(ctx, instr, ops):
    lo, x, hi = np.broadcast_arrays(*ops)  # min and max may be scalars
    return apply_rule(_CLAMP, instr, [lo, x, hi])


@impl(Opcode.COMPLEX)
def complex_(ctx, instr, ops):
    re, im = np.broadcast_arrays(*ops)
    return nm.make_complex(re, im, instr.shape.np_dtype)


@impl(Opcode.REAL, Opcode.IMAG)
def complex_part(ctx, instr, ops):
    x = ops[0]
    out_dt = instr.shape.np_dtype
    if nm.is_complex(x.dtype):
        part = x.real if instr.opcode == Opcode.REAL else x.imag
        return nm.as_array(part, out_dt)
    if instr.opcode == Opcode.REAL:
        return x.copy()
    return np.zeros(x.shape, out_dt)


# ---- map --------------------------------------------------------------------------------------

_VECTORIZABLE = ELEMENTWISE | {Opcode.PARAMETER, Opcode.CONSTANT}


def _is_vectorizable(comp) -> bool:
    """A computation of elementwise ops on scalars can run on whole arrays at once."""
    for instr in comp.instructions:
        if instr.opcode not in _VECTORIZABLE:
            return False
        if instr.opcode == Opcode.MAP and not _is_vectorizable(instr.called[0]):
            return False
        if instr.opcode == Opcode.CONSTANT and instr.shape.rank:
            return False
    return True


@impl(Opcode.MAP)
def map_(ctx, instr, ops):
    comp = instr.called[0]
    out_dt = instr.shape.np_dtype
    args = np.broadcast_arrays(*ops) if ops else []
    dims = instr.shape.dims
    if _is_vectorizable(comp):
        result = ctx.call(comp, list(args))
        return np.broadcast_to(nm.as_array(result, out_dt), dims).copy()
    out = np.empty(dims, out_dt)
    for index in np.ndindex(*dims):
        out[index] = ctx.call(comp, [np.asarray(a[index]) for a in args])
    return out
