"""rng-bit-generator expansion: Threefry-2x32 and Philox-4x32 as u32/u64 integer ops.

The expansion reproduces XLA CPU bit for bit (the interpreter's rng.py is the reference):
  * the state is u64[n] with the key in element 0;
  * THREE_FRY: element 1 is a 64-bit counter; block i encrypts counter+i (split into two u32
    words) under the key with 20 rounds; 32-bit outputs halve the first even dimension (else
    the largest) and interleave the two words of each block along it; 64-bit outputs join the
    two words of one block per element;
  * PHILOX (and DEFAULT, which is PHILOX on CPU): the 128-bit counter is (state[1], state[2]),
    or (state[1], state[0]) for a two-element state; block i encrypts counter+i with 10 rounds
    and its four u32 words are consecutive outputs (two u64 outputs per block for 64 bits);
  * narrower outputs keep the low bits of 32-bit draws; the counter advances by the number of
    blocks used.
"""

from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Instruction, Module, Opcode, PrimitiveType
from ..util.record import dataclass
from .base import Pass, register_pass
from .expand_builder import Emit
from .expand_rng_rounds import Words, philox_rounds, threefry_rounds
from .rewrite import P, RuleTable, rewrite_module

Op = Opcode
U32, U64 = PrimitiveType.U32, PrimitiveType.U64
THREE_FRY, PHILOX = 1, 2
RNG_RULES = RuleTable("rng-bit-generator-expander")
_b = Emit()
_UNSIGNED = {8: PrimitiveType.U8, 16: PrimitiveType.U16, 32: U32, 64: U64}


def _split64(x: Instruction) -> Words:
    """A u64 array as its (low, high) u32 words."""
    high = _b.shr(x, _b.full(32, U64, x.shape.dims))
    return _b.convert(x, U32), _b.convert(high, U32)


def _join64(low: Instruction, high: Instruction) -> Instruction:
    wide_high = _b.shl(_b.convert(high, U64), _b.full(32, U64, high.shape.dims))
    return _b.or_(_b.convert(low, U64), wide_high)


def _counters(start: Instruction, n: int) -> Instruction:
    """u64[n]: start + 0 .. start + n-1 (wrapping)."""
    return _b.add(_b.bcast(start, (n,)), _b.iota(U64, (n,)))


def _halving_axis(dims: tuple[int, ...]) -> int:
    """Where XLA halves a shape: the first even dimension, else the first largest one."""
    for i, d in enumerate(dims):
        if d % 2 == 0:
            return i
    return max(range(len(dims)), key=lambda i: (dims[i], -i))


def _interleave(x0: Instruction, x1: Instruction, dims: tuple[int, ...]) -> Instruction:
    """Threefry 32-bit layout: word j of half-index i lands at 2*i + j of the halved axis."""
    axis = _halving_axis(dims)
    half = list(dims)
    half[axis] = (dims[axis] + 1) // 2
    split = half[:axis + 1] + [1] + half[axis + 1:]
    pair = _b.concat([_b.reshape(x0, split), _b.reshape(x1, split)], axis + 1)
    full = list(half)
    full[axis] *= 2
    return _b.slice(_b.reshape(pair, full), [0] * len(dims), dims)


def _threefry(key: Instruction, counter: Instruction, dims: tuple[int, ...], bits: int):
    """(bits as u32/u64 of `dims`, advanced counter)."""
    if bits == 64 or not dims:
        n = max(1, _count(dims))
    else:
        axis = _halving_axis(dims)
        n = _count(dims) // dims[axis] * ((dims[axis] + 1) // 2)
    x0, x1 = threefry_rounds(_split64(_counters(counter, n)), _split64(key))
    if bits == 64:
        values = _b.reshape(_join64(x0, x1), dims)
    elif not dims:
        values = _b.reshape(x0, ())
    else:
        values = _interleave(x0, x1, dims)
    return values, _b.add(counter, _b.scalar(n, U64))


def _philox(key: Instruction, low: Instruction, high: Instruction, dims: tuple[int, ...],
            bits: int):
    """(bits as u32/u64 of `dims`, advanced (low, high) counter)."""
    n = _count(dims)
    words_per_value = 2 if bits == 64 else 1
    blocks = (n * words_per_value + 3) // 4
    lows = _counters(low, blocks)
    carry = _b.compare(lows, _b.bcast(low, (blocks,)), "LT", "UNSIGNED")
    highs = _b.add(_b.bcast(high, (blocks,)),
                   _b.convert(carry, U64))
    out = philox_rounds([*_split64(lows), *_split64(highs)], _split64(key))
    if bits == 64:
        out = [_join64(out[0], out[1]), _join64(out[2], out[3])]
    columns = [_b.reshape(w, (blocks, 1)) for w in out]
    flat = _b.reshape(_b.concat(columns, 1), (blocks * len(out),))
    values = _b.reshape(_b.slice(flat, [0], [n]), dims)
    new_low = _b.add(low, _b.scalar(blocks, U64))
    wrapped = _b.compare(new_low, low, "LT", "UNSIGNED")
    new_high = _b.add(high, _b.convert(wrapped, U64))
    return values, new_low, new_high


def _count(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _generate(instr: Instruction, state: Instruction, size: int, data_dims, bits: int):
    """(new state u64[size], raw bits) for the instruction's algorithm."""
    algorithm = instr.attrs.rng_algorithm or PHILOX  # DEFAULT is PHILOX on XLA CPU
    key = _b.element(state, 0)
    if algorithm == THREE_FRY:
        if size < 2:
            raise UnsupportedError(f"rng-bit-generator %{instr.name}: THREE_FRY needs u64[2]")
        values, counter = _threefry(key, _b.element(state, 1), data_dims, bits)
        parts = [key, counter] + [_b.element(state, k) for k in range(2, size)]
    elif algorithm == PHILOX:
        if size not in (2, 3):
            raise UnsupportedError(f"rng-bit-generator %{instr.name}: PHILOX needs u64[2|3]")
        high = _b.element(state, 2) if size == 3 else key
        values, low, high = _philox(key, _b.element(state, 1), high, data_dims, bits)
        parts = [key, low, high] if size == 3 else [key, low]
    else:
        raise UnsupportedError(f"rng-bit-generator %{instr.name}: unknown algorithm {algorithm}")
    new_state = _b.concat([_b.reshape(p, (1,)) for p in parts], 0)
    return new_state, values


def _expandable(instr: Instruction) -> bool:
    state_shape, data_shape = instr.shape.tuple_shapes
    return (state_shape.rank == 1 and state_shape.dtype.bits == 64
            and data_shape.dtype.bits in _UNSIGNED and data_shape.dtype.kind != "complex")


@RNG_RULES.rule(P(Op.RNG_BIT_GENERATOR, where=_expandable))
def expand_rng_bit_generator(instr):
    """rng-bit-generator → the same bits from integer ops (see the module docstring)."""
    (state_in,) = instr.operands
    state_shape, data_shape = instr.shape.tuple_shapes
    bits = data_shape.dtype.bits
    state = _b.convert(state_in, U64, Op.BITCAST_CONVERT)
    if data_shape.num_elements == 0:
        # Nothing to draw: the state comes back unchanged.
        empty = _b.full(0, data_shape.element_type, data_shape.dims)
        return _b.tuple([state_in, empty], instr.shape)
    new_state, raw = _generate(instr, state, state_shape.dims[0], data_shape.dims,
                               64 if bits == 64 else 32)
    data = _b.convert(raw, _UNSIGNED[bits])  # narrow types keep the low bits
    data = _b.convert(data, data_shape.element_type, Op.BITCAST_CONVERT)
    new_state = _b.convert(new_state, state_shape.element_type, Op.BITCAST_CONVERT)
    return _b.tuple([new_state, data], instr.shape)


@register_pass
@dataclass
class RngBitGeneratorExpander(Pass):
    """Rewrites rng-bit-generator (THREE_FRY, PHILOX, DEFAULT = PHILOX) into integer ops.

    Assumes: a valid module; a u64[n] (or s64) state. Guarantees: every rng-bit-generator with
    a rank-1 64-bit state and an 8/16/32/64-bit output type is expanded (others stay); the
    bits and the returned state equal XLA CPU's exactly.
    """

    name = "rng-bit-generator-expander"

    def run(self, module: Module) -> bool:
        return rewrite_module(module, RNG_RULES).changed
