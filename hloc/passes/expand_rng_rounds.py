"""The Threefry-2x32 (20 rounds) and Philox-4x32 (10 rounds) block functions as HLO u32 ops.

Both take u32 arrays of one shape (the counter words) and scalar u32 key words; the keys are
broadcast once. Constants are the published ones (Salmon et al., "Parallel random numbers: as
easy as 1, 2, 3", 2011).
"""

from __future__ import annotations

from ..ir import Instruction, PrimitiveType
from .expand_builder import Emit

U32, U64 = PrimitiveType.U32, PrimitiveType.U64
Words = tuple[Instruction, Instruction]
_b = Emit()

THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
THREEFRY_PARITY = 0x1BD11BDA
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_MASK32 = 0xFFFFFFFF


def _const(value: int, like: Instruction) -> Instruction:
    return _b.full(value & _MASK32, U32, like.shape.dims)


def _rotl(v: Instruction, r: int) -> Instruction:
    return _b.or_(_b.shl(v, _const(r, v)), _b.shr(v, _const(32 - r, v)))


def threefry_rounds(counter: Words, key: Words) -> Words:
    """Threefry-2x32 of the (x0, x1) counter words under (key0, key1) scalar keys."""
    x0, x1 = counter
    dims = x0.shape.dims
    k0, k1 = key
    k2 = _b.xor(_b.xor(k0, k1), _b.scalar(THREEFRY_PARITY, U32))
    ks = [_b.bcast(k, dims) for k in (k0, k1, k2)]
    x0 = _b.add(x0, ks[0])
    x1 = _b.add(x1, ks[1])
    for block in range(5):
        for r in THREEFRY_ROTATIONS[block % 2]:
            x0 = _b.add(x0, x1)
            x1 = _b.xor(_rotl(x1, r), x0)
        # Key injection after every four rounds, the block number added to the second word.
        x0 = _b.add(x0, ks[(block + 1) % 3])
        x1 = _b.add(_b.add(x1, ks[(block + 2) % 3]), _const(block + 1, x1))
    return x0, x1


def _mul_hi_lo(a: Instruction, m: int) -> Words:
    """(high, low) u32 words of the 64-bit product a * m."""
    product = _b.mul(_b.convert(a, U64), _b.full(m, U64, a.shape.dims))
    high = _b.convert(_b.shr(product, _b.full(32, U64, a.shape.dims)), U32)
    return high, _b.convert(product, U32)


def philox_rounds(counter: list[Instruction], key: Words) -> list[Instruction]:
    """Philox-4x32 of four u32 counter words under (key0, key1) scalar keys."""
    c0, c1, c2, c3 = counter
    dims = c0.shape.dims
    k0, k1 = key
    for n in range(10):
        # Round n uses the key bumped n times by the Weyl constants (u32 arithmetic wraps).
        r0 = _b.bcast(_b.add(k0, _b.scalar((n * PHILOX_W[0]) & _MASK32, U32)), dims)
        r1 = _b.bcast(_b.add(k1, _b.scalar((n * PHILOX_W[1]) & _MASK32, U32)), dims)
        hi0, lo0 = _mul_hi_lo(c0, PHILOX_M[0])
        hi1, lo1 = _mul_hi_lo(c2, PHILOX_M[1])
        c0, c1, c2, c3 = (_b.xor(_b.xor(hi1, c1), r0), lo1, _b.xor(_b.xor(hi0, c3), r1), lo0)
    return [c0, c1, c2, c3]
