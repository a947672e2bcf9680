"""rng-bit-generator (THREE_FRY, PHILOX; DEFAULT is PHILOX as on XLA CPU) and rng.

Bit-exact with XLA's expansion of rng-bit-generator: the state is u64[n] with the key in
element 0. THREE_FRY uses element 1 as a 64-bit counter; PHILOX uses elements 1..2 as a
128-bit counter (with a 2-element state: the counter is (state[1], state[0])).
`rng` (RandomDistribution UNIFORM/NORMAL) is refused: XLA seeds it from a hidden per-process
state, so no reference value exists.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...ir import Opcode
from . import numeric as nm
from .registry import impl

U32 = np.uint32
U64 = np.uint64
RNG_DEFAULT, RNG_THREE_FRY, RNG_PHILOX = 0, 1, 2
_CPU_DEFAULT = RNG_PHILOX

_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)


def _lo32(x: np.ndarray) -> np.ndarray:
    return (x & U64(0xFFFFFFFF)).astype(U32)


def _hi32(x: np.ndarray) -> np.ndarray:
    return (x >> U64(32)).astype(U32)


def _join64(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(U64) | (hi.astype(U64) << U64(32))


# ---- Threefry-2x32 (20 rounds) ------------------------------------------------------------------

def _rotl32(v, r):
    return (v << U32(r)) | (v >> U32(32 - r))


def threefry2x32(x0, x1, key0, key1):
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011) on uint32 arrays."""
    with np.errstate(over="ignore"):  # uint32 arithmetic wraps by design
        return _threefry_rounds(x0, x1, key0, key1)


def _threefry_rounds(x0, x1, key0, key1):
    ks = (U32(key0), U32(key1), U32(_THREEFRY_PARITY ^ int(key0) ^ int(key1)))
    x0 = x0 + ks[0]
    x1 = x1 + ks[1]
    for block in range(5):
        for r in _THREEFRY_ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = _rotl32(x1, r) ^ x0
        # Key injection after every four rounds, with the block counter added.
        x0 = x0 + ks[(block + 1) % 3]
        x1 = x1 + ks[(block + 2) % 3] + U32(block + 1)
    return x0, x1


def _split_dim(dims: tuple[int, ...]) -> int:
    """Where XLA halves a shape: the first even dimension, else the (first) largest one."""
    for i, d in enumerate(dims):
        if d % 2 == 0:
            return i
    return max(range(len(dims)), key=lambda i: (dims[i], -i))


def threefry_bits32(key: int, counter: int, dims: tuple[int, ...]):
    """u32 bits of shape `dims` and the advanced counter (XLA's halves-and-interleave layout)."""
    if not dims:
        x0, _ = _threefry_block(key, counter, 1)
        return x0.reshape(()), counter + 1
    axis = _split_dim(dims)
    half = list(dims)
    half[axis] = (dims[axis] + 1) // 2
    n = int(np.prod(half))
    x0, x1 = _threefry_block(key, counter, n)
    # Output pair j of half-index i lands at position 2*i + j of the split dimension.
    pair = np.stack([x0.reshape(half), x1.reshape(half)], axis=axis + 1)
    full = list(dims)
    full[axis] = 2 * half[axis]
    out = pair.reshape(full)
    return out[tuple(slice(0, d) for d in dims)], counter + n


def _threefry_block(key: int, counter: int, n: int):
    inputs = U64(counter) + np.arange(n, dtype=U64)
    return threefry2x32(_lo32(inputs), _hi32(inputs), key & 0xFFFFFFFF, key >> 32)


def threefry_bits64(key: int, counter: int, dims: tuple[int, ...]):
    n = int(np.prod(dims))
    x0, x1 = _threefry_block(key, counter, n)
    return _join64(x0, x1).reshape(dims), counter + n


# ---- Philox-4x32 (10 rounds) --------------------------------------------------------------------

def philox4x32(ctr: list[np.ndarray], key0: int, key1: int) -> list[np.ndarray]:
    """Philox-4x32 with 10 rounds on four uint32 counter words."""
    c0, c1, c2, c3 = ctr
    for r in range(10):
        # Round r uses the key bumped r times by the Weyl constants (mod 2**32).
        k0 = U32((key0 + r * _PHILOX_W[0]) & 0xFFFFFFFF)
        k1 = U32((key1 + r * _PHILOX_W[1]) & 0xFFFFFFFF)
        p0 = c0.astype(U64) * U64(_PHILOX_M[0])
        p1 = c2.astype(U64) * U64(_PHILOX_M[1])
        c0, c1, c2, c3 = (_hi32(p1) ^ c1 ^ k0, _lo32(p1), _hi32(p0) ^ c3 ^ k1, _lo32(p0))
    return [c0, c1, c2, c3]


def _philox_blocks(key: int, counter: tuple[int, int], blocks: int):
    """Philox outputs for 128-bit counters counter+0 .. counter+blocks-1; new counter."""
    low, high = counter
    offsets = np.arange(blocks, dtype=U64)
    lows = U64(low) + offsets
    highs = np.where(lows < U64(low), U64(high) + U64(1), U64(high))  # carry
    words = [_lo32(lows), _hi32(lows), _lo32(highs), _hi32(highs)]
    out = philox4x32(words, key & 0xFFFFFFFF, key >> 32)
    total = (low + (high << 64) + blocks) % (1 << 128)
    return out, (total & ((1 << 64) - 1), total >> 64)


def philox_bits32(key: int, counter: tuple[int, int], dims: tuple[int, ...]):
    n = int(np.prod(dims))
    out, new_counter = _philox_blocks(key, counter, (n + 3) // 4)
    # Round-robin: element 4*i + j comes from output word j of block i.
    flat = np.stack(out, axis=1).reshape(-1)[:n]
    return flat.reshape(dims), new_counter


def philox_bits64(key: int, counter: tuple[int, int], dims: tuple[int, ...]):
    n = int(np.prod(dims))
    out, new_counter = _philox_blocks(key, counter, (2 * n + 3) // 4)
    pairs = [_join64(out[0], out[1]), _join64(out[2], out[3])]
    flat = np.stack(pairs, axis=1).reshape(-1)[:n]
    return flat.reshape(dims), new_counter


# ---- the opcodes --------------------------------------------------------------------------------

def _generate_threefry(state: list[int], dims, bits: int):
    if len(state) < 2:
        raise UnsupportedError("THREE_FRY rng-bit-generator needs a u64[2] state")
    gen = threefry_bits64 if bits == 64 else threefry_bits32
    values, counter = gen(state[0], state[1], dims)
    return [state[0], counter % (1 << 64)] + state[2:], values


def _generate_philox(state: list[int], dims, bits: int):
    if len(state) not in (2, 3):
        raise UnsupportedError("PHILOX rng-bit-generator needs a u64[2] or u64[3] state")
    counter = (state[1], state[2]) if len(state) == 3 else (state[1], state[0])
    gen = philox_bits64 if bits == 64 else philox_bits32
    values, (low, high) = gen(state[0], counter, dims)
    # A two-word state keeps only the low counter word (the high one is the key).
    new_state = [state[0], low, high] if len(state) == 3 else [state[0], low]
    return new_state, values


_GENERATORS = {RNG_THREE_FRY: _generate_threefry, RNG_PHILOX: _generate_philox}


@impl(Opcode.RNG_BIT_GENERATOR)
def rng_bit_generator(ctx, instr, ops):
    state = [int(v) for v in np.asarray(ops[0]).astype(U64).reshape(-1)]
    data_shape = instr.shape.tuple_shapes[1]
    algorithm = instr.attrs.rng_algorithm or RNG_DEFAULT
    algorithm = _CPU_DEFAULT if algorithm == RNG_DEFAULT else algorithm
    if algorithm not in _GENERATORS:
        raise UnsupportedError(f"rng-bit-generator %{instr.name}: unknown algorithm {algorithm}")
    dt = data_shape.np_dtype
    bits = nm.bits_of(dt)
    if bits not in (8, 16, 32, 64) or nm.is_complex(dt) or dt == nm.BOOL:
        raise UnsupportedError(f"rng-bit-generator %{instr.name}: unsupported output type "
                               f"{nm.info(dt).name}")
    with np.errstate(over="ignore"):  # uint32/uint64 arithmetic wraps by design
        new_state, values = _GENERATORS[algorithm](state, data_shape.dims, bits)
    # Narrow outputs keep the low bits of 32-bit draws.
    out = nm.from_bits(np.asarray(values).astype(U64), dt)
    state_out = np.array(new_state, dtype=U64).astype(ops[0].dtype).reshape(ops[0].shape)
    return state_out, out


@impl(Opcode.RNG)
def rng(ctx, instr, ops):
    raise UnsupportedError(
        f"rng %{instr.name}: the rng opcode is not deterministic in XLA (it draws from a hidden "
        "per-process seed), so the reference interpreter cannot reproduce it; use "
        "rng-bit-generator (jax.random with an explicit key) instead")
