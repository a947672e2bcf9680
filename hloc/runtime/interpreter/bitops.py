"""Bitwise elementwise ops: and, or, xor, not, shifts, count-leading-zeros, popcnt.

Shift amounts are read as unsigned: an amount >= the bit width (negative ones included)
gives 0 for shift-left and shift-right-logical and the sign fill (0 or -1) for
shift-right-arithmetic, as XLA defines it.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...ir import Opcode
from . import numeric as nm
from .registry import impl

_U64 = np.uint64
_LOGICAL = {Opcode.AND: np.logical_and, Opcode.OR: np.logical_or, Opcode.XOR: np.logical_xor}
_BITWISE = {Opcode.AND: np.bitwise_and, Opcode.OR: np.bitwise_or, Opcode.XOR: np.bitwise_xor}


def _require_integral(instr, x: np.ndarray) -> None:
    if not nm.info(x.dtype).is_integral and x.dtype != nm.BOOL:
        raise UnsupportedError(f"{instr.opcode.value} needs integer or pred operands, got "
                               f"{nm.info(x.dtype).name} (instruction %{instr.name})")


@impl(*_BITWISE)
def bitwise_binary(ctx, instr, ops):
    a, b = np.broadcast_arrays(*ops)
    _require_integral(instr, a)
    if a.dtype == nm.BOOL:
        return nm.as_array(_LOGICAL[instr.opcode](a, b), nm.BOOL)
    return nm.int_op(_BITWISE[instr.opcode], [a, b], a.dtype)


@impl(Opcode.NOT)
def not_(ctx, instr, ops):
    x = ops[0]
    _require_integral(instr, x)
    if x.dtype == nm.BOOL:
        return np.logical_not(x)
    return nm.int_op(np.invert, [x], x.dtype)


# ---- shifts -----------------------------------------------------------------------------------

def _shift_left(a_bits, amount, width, signed):
    return a_bits << amount


def _shift_right_logical(a_bits, amount, width, signed):
    return a_bits >> amount


def _shift_right_arithmetic(a_bits, amount, width, signed):
    return (signed >> amount.astype(np.int64)).view(_U64)


_SHIFTS = {
    Opcode.SHIFT_LEFT: _shift_left,
    Opcode.SHIFT_RIGHT_LOGICAL: _shift_right_logical,
    Opcode.SHIFT_RIGHT_ARITHMETIC: _shift_right_arithmetic,
}


@impl(*_SHIFTS)
def shift(ctx, instr, ops):
    a, s = np.broadcast_arrays(*ops)
    _require_integral(instr, a)
    width = nm.bits_of(a.dtype)
    a_bits = nm.to_bits(a)
    amount = nm.to_bits(s)  # unsigned reading: negative amounts are huge
    in_range = amount < _U64(width)
    safe = np.where(in_range, amount, _U64(0))
    signed = _sign_extend(a_bits, width)
    shifted = _SHIFTS[instr.opcode](a_bits, safe, width, signed)
    if instr.opcode == Opcode.SHIFT_RIGHT_ARITHMETIC:
        saturated = np.where(signed < 0, ~_U64(0), _U64(0))
    else:
        saturated = np.zeros_like(a_bits)
    return nm.from_bits(np.where(in_range, shifted, saturated), a.dtype)


def _sign_extend(bits: np.ndarray, width: int) -> np.ndarray:
    """Bit patterns of `width` bits read as two's-complement int64."""
    if width == 64:
        return bits.view(np.int64)
    v = bits.astype(np.int64)
    return np.where(v >= (1 << (width - 1)), v - (1 << width), v)


# ---- counting ---------------------------------------------------------------------------------

def bit_length(v: np.ndarray) -> np.ndarray:
    """Number of significant bits of each uint64 (0 for 0)."""
    length = np.zeros(v.shape, _U64)
    v = v.copy()
    for k in (32, 16, 8, 4, 2, 1):
        big = (v >> _U64(k)) != 0
        length = np.where(big, length + _U64(k), length)
        v = np.where(big, v >> _U64(k), v)
    return length + (v != 0).astype(_U64)


def popcount(v: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 (SWAR count; numpy < 2 has no bitwise_count)."""
    v = v - ((v >> _U64(1)) & _U64(0x5555555555555555))
    v = (v & _U64(0x3333333333333333)) + ((v >> _U64(2)) & _U64(0x3333333333333333))
    v = (v + (v >> _U64(4))) & _U64(0x0F0F0F0F0F0F0F0F)
    return (v * _U64(0x0101010101010101)) >> _U64(56)


@impl(Opcode.CLZ)
def count_leading_zeros(ctx, instr, ops):
    x = ops[0]
    _require_integral(instr, x)
    with np.errstate(all="ignore"):
        count = _U64(nm.bits_of(x.dtype)) - bit_length(nm.to_bits(x))
    return nm.from_bits(count, x.dtype)


@impl(Opcode.POPCNT)
def popcnt(ctx, instr, ops):
    x = ops[0]
    _require_integral(instr, x)
    with np.errstate(all="ignore"):
        count = popcount(nm.to_bits(x))
    return nm.from_bits(count, x.dtype)
