"""rng-bit-generator in the reference interpreter: bit-exact with XLA CPU.

Oracles: the Random123 known-answer vectors for the two block functions, and outputs of XLA
CPU (jaxlib 0.10.2, `stablehlo.rng_bit_generator`) for shapes and types the samples in
samples/ops/rng_bit_generator_* and samples/random do not cover (those run in
tests/test_interp_samples.py): u64 and narrow outputs, scalars, shapes without an even
dimension, three-word Philox states and counter carries.
"""

from __future__ import annotations

import numpy as np
import pytest

from hloc.errors import UnsupportedError
from hloc.ir import Attrs, Computation, Module, Opcode, Shape, dtypes
from hloc.runtime.interpreter import evaluate
from hloc.runtime.interpreter.rng import philox4x32, threefry2x32

pytestmark = pytest.mark.pure

# Random123 tests/kat_vectors: counter words, key words -> output words.
THREEFRY_KAT = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("ctr,key,expected", THREEFRY_KAT)
def test_threefry2x32_known_answers(ctr, key, expected):
    words = [np.array([c], np.uint32) for c in ctr]
    assert tuple(int(w[0]) for w in threefry2x32(*words, *key)) == expected


@pytest.mark.parametrize("ctr,key,expected", PHILOX_KAT)
def test_philox4x32_known_answers(ctr, key, expected):
    words = [np.array([c], np.uint32) for c in ctr]
    assert tuple(int(w[0]) for w in philox4x32(words, *key)) == expected


# (algorithm, input state, data shape, data type, XLA's new state, XLA's bits in row-major order)
XLA_CASES = [
    ("threefry", [0x7668BCDF6BFD1165, 0xFFFFFFFFFFFFFFFF], (), "u32",
     [0x7668BCDF6BFD1165, 0x0],
     [0xBB785C9B]),
    ("threefry", [0xE4457EA05BC3AEB8, 0x6B543487F75548A0], (3, 5), "u32",
     [0xE4457EA05BC3AEB8, 0x6B543487F75548A9],
     [0xF8CB75F6, 0xE483F2CC, 0x68CCB716, 0x3A4ECAE9, 0x88D35DE7, 0xDA445F94, 0x3C903BBA,
      0x4CA51BFB, 0xA64BFC8C, 0x4E74C156, 0x00C706C1, 0x0F84E80D, 0x7449C283, 0x9D06983F,
      0x37437BA0]),
    ("threefry", [0xF3F657C243B100DD, 0xFFFFFFFFFFFFFFFF], (5,), "u64",
     [0xF3F657C243B100DD, 0x4],
     [0xD52D8E63916A8C21, 0x2392FDAB8C129A91, 0xC468093DF45FE414, 0x93356DD827DAEFC5,
      0x4EBA483A45746319]),
    ("threefry", [0x1786E2E031F0630D, 0xFFFFFFFFFFFFFFFF], (2, 3), "u8",
     [0x1786E2E031F0630D, 0x2],
     [0x78, 0xC0, 0x81, 0xDD, 0x29, 0x47]),
    ("threefry", [0x158156224F2FBB12, 0x5009D352EBABB607], (4, 1, 3), "u16",
     [0x158156224F2FBB12, 0x5009D352EBABB60D],
     [0xB656, 0x6CFE, 0x81A1, 0xEAF6, 0xB773, 0x6F67, 0xB3DB, 0xBDEC, 0x6786, 0x8288, 0x8EB0,
      0x6D01]),
    ("threefry", [0x037432571B171B2F, 0xFFFFFFFFFFFFFFFF], (1, 7), "u32",
     [0x037432571B171B2F, 0x3],
     [0x968FD045, 0xE8565296, 0xDA6212AD, 0x029895E3, 0xC6E1757B, 0xEF673475, 0x8ABA8EFD]),
    ("philox", [0x38097DF8042238D8, 0x9976BA00E4DE4631], (5,), "u32",
     [0x38097DF8042238D8, 0x9976BA00E4DE4633],
     [0x59F9C70F, 0xF9232B26, 0xF00AAE65, 0x40B23F61, 0x1684EDBC]),
    ("philox", [0xCC942819EFC59E95, 0xE420EAFBD73C943C], (2, 3), "u64",
     [0xCC942819EFC59E95, 0xE420EAFBD73C943F],
     [0x4D36A0F17D363F1B, 0xCDDAEF01F33CE8D0, 0x62C5BD4F5D69511F, 0x6A41D6C389F58934,
      0x3057C1FC9FD2A82E, 0xF604E1DE2C43C0CF]),
    ("philox", [0xE7407FBFFAFCEA84, 0xDDF1F0ACED5A4BC8], (9,), "u8",
     [0xE7407FBFFAFCEA84, 0xDDF1F0ACED5A4BCB],
     [0xF7, 0x6E, 0x04, 0x8B, 0x82, 0xA0, 0x7D, 0x33, 0x19]),
    ("philox", [0x9E21182AA7E3D395, 0xFFFFFFFFFFFFFFFF, 0x41CE192BF8D42887], (1, 7), "u32",
     [0x9E21182AA7E3D395, 0x1, 0x41CE192BF8D42888],
     [0xD2578ACB, 0x9F7F19EA, 0xCEDC22F3, 0x3FCA9CCB, 0x6C7CD351, 0xD604FB29, 0xA5C7626A]),
    ("philox", [0xB283C85F638A03E1, 0x1640222FA165F40F, 0x784FAF15B8F2FF4A], (5,), "u64",
     [0xB283C85F638A03E1, 0x1640222FA165F412, 0x784FAF15B8F2FF4A],
     [0xE8D5CF106F1F5BA9, 0xA8964E35141A7283, 0x27CC51219FC1E4F9, 0xD2BD93BE40C8451F,
      0xCBBC4A8FF51C7E51]),
    ("philox", [0x8C7709BB7A829C6E, 0xFFFFFFFFFFFFFFFF, 0x1B00C4BE824D38E4], (), "u16",
     [0x8C7709BB7A829C6E, 0x0, 0x1B00C4BE824D38E5],
     [0x30B8]),
    ("default", [0x462809029E0F298E, 0x01D0C523EB60322E], (3, 5), "u32",
     [0x462809029E0F298E, 0x01D0C523EB603232],
     [0x2ECA36C9, 0x5FFC6157, 0x4F688F36, 0x2CBF0CFB, 0x887E84D2, 0xD263E349, 0x5E0D0EC9,
      0x06074EC9, 0xA4C1622D, 0x52151834, 0xD8E49F13, 0xC1A5D392, 0xA6C9B0D2, 0xB13FB2AD,
      0x2B772861]),
    ("default", [0x3FC39C0CA45C1870, 0x9831496CD32A810E, 0x2FDB8DC906CD4845], (2, 3), "u64",
     [0x3FC39C0CA45C1870, 0x9831496CD32A8111, 0x2FDB8DC906CD4845],
     [0xBB31003B77042CA1, 0x53372D99CFFE25AB, 0x5358D37AD94E686A, 0xB17AE4D0C2380AB7,
      0x7AD7DD72EFE3908E, 0x2522D2FC8FB94664]),
]
ALGORITHMS = {"default": 0, "threefry": 1, "philox": 2}


def generate(algorithm: str, state, dims, dtype: str):
    """Run one rng-bit-generator instruction; returns (new state, bits) as arrays."""
    st = np.array(state, np.uint64)
    state_shape = Shape.array("u64", st.shape)
    comp = Computation("main")
    param = comp.create(Opcode.PARAMETER, state_shape, attrs=Attrs(parameter_number=0))
    out = Shape.tuple_of([state_shape, Shape.array(dtype, dims)])
    comp.root = comp.create(Opcode.RNG_BIT_GENERATOR, out, [param],
                            attrs=Attrs(rng_algorithm=ALGORITHMS[algorithm]))
    module = Module("rng")
    module.add_computation(comp, entry=True)
    new_state, values = evaluate(module, [st]).elements
    return new_state.array, values.array


@pytest.mark.parametrize("alg,state,dims,dtype,new_state,expected", XLA_CASES,
                         ids=[f"{c[0]}-{len(c[1])}w-{c[3]}{list(c[2])}" for c in XLA_CASES])
def test_matches_xla_cpu(alg, state, dims, dtype, new_state, expected):
    got_state, got = generate(alg, state, dims, dtype)
    assert got.shape == dims
    assert got.dtype == dtypes.to_numpy(dtypes.from_name(dtype))
    assert [int(v) for v in got_state] == new_state
    assert [int(v) for v in got.reshape(-1)] == expected


def test_default_is_philox_on_cpu():
    state = [0x0123456789ABCDEF, 0xFEDCBA9876543210]
    for dtype, dims in (("u32", (4, 3)), ("u64", (5,))):
        a, b = generate("default", state, dims, dtype), generate("philox", state, dims, dtype)
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


def test_signed_and_float_outputs_are_the_unsigned_bits():
    state = [7, 11]
    _, unsigned = generate("philox", state, (6,), "u32")
    _, signed = generate("philox", state, (6,), "s32")
    assert signed.view(np.uint32).tolist() == unsigned.tolist()
    _, half = generate("threefry", state, (2, 2), "f16")
    _, u16 = generate("threefry", state, (2, 2), "u16")
    assert half.view(np.uint16).tolist() == u16.tolist()


def test_consecutive_calls_continue_the_stream():
    # Threefry counters advance by half the element count: the second call's first block is
    # the first call's block after its last one.
    state = [0xABCDEF, 0]
    s1, first = generate("threefry", state, (4,), "u64")
    _, second = generate("threefry", s1.tolist(), (4,), "u64")
    _, both = generate("threefry", state, (8,), "u64")
    assert first.tolist() + second.tolist() == both.tolist()
    p1, a = generate("philox", state, (8,), "u32")
    _, b = generate("philox", p1.tolist(), (8,), "u32")
    _, ab = generate("philox", state, (16,), "u32")
    assert a.tolist() + b.tolist() == ab.tolist()


def test_empty_output_keeps_the_state():
    new_state, bits = generate("philox", [1, 2], (0, 3), "u32")
    assert bits.shape == (0, 3) and new_state.tolist() == [1, 2]


@pytest.mark.parametrize("alg,state", [("philox", [1, 2, 3, 4]), ("threefry", [1])])
def test_bad_state_sizes_are_refused(alg, state):
    with pytest.raises(UnsupportedError):
        generate(alg, state, (4,), "u32")
