"""Golden tests for the expanders: logistic, TOTALORDER comparison, batch-norm, rng-bit-generator.

The reference interpreter's own implementations of the expanded ops are the oracle (they are
checked against XLA in the samples): comparisons and random bits must match bit for bit,
logistic and batch-norm within the rounding of the different evaluation order.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hloc.ir.text.parser import parse_module
from hloc.runtime.interpreter import evaluate

from .support.golden import bits_equal, filecheck, parse_checks
from .support.hlo import run_passes

pytestmark = pytest.mark.pure


def _close(rtol: float, atol: float = 0.0):
    def same(before, after) -> bool:
        return all(np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol,
                               atol=atol, equal_nan=True)
                   for a, b in zip(before.flatten(), after.flatten(), strict=True))
    return same


def _expand(text: str, spec: str, args, checks: str = ""):
    """Run `spec`; return (before, after) interpreter results and the printed module."""
    module = parse_module(text)
    before = evaluate(module, args)
    run_passes(module, spec)
    from hloc.ir.text.printer import print_module

    printed = print_module(module)
    if checks:
        filecheck(printed, parse_checks(checks))
    return before, evaluate(module, args), printed


# ---- logistic -------------------------------------------------------------------------------
LOGISTIC = """
HloModule sigmoid
ENTRY e {{
  x = {t}[64] parameter(0)
  ROOT s = {t}[64] logistic(x)
}}
"""


def test_logistic_becomes_one_over_one_plus_exp():
    x = np.linspace(-30, 30, 64).astype(np.float32)
    before, after, _ = _expand(LOGISTIC.format(t="f32"), "logistic-expander", [x], """
        CHECK-NOT: logistic
        CHECK: negate(%x)
        CHECK: exponential(
        CHECK: add(
        CHECK: ROOT %_ = f32[64]{0} divide(
    """)
    assert np.allclose(before.array, after.array, rtol=2e-7, atol=0)
    assert np.allclose(after.array, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)


def test_f16_logistic_matches_xlas_rounding_at_every_step():
    x = np.linspace(-16, 16, 64).astype(np.float16)
    before, after, _ = _expand(LOGISTIC.format(t="f16"), "logistic-expander", [x])
    assert bits_equal(before.array, after.array)
    assert after.array[0] == 0  # exp(16) overflows f16: XLA CPU gives exactly 0 here


# ---- comparison -----------------------------------------------------------------------------
SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-40, -1e-40, 3.5, -2.25]


def _special(dtype) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.array(SPECIALS, np.float64).astype(dtype)


@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16", "f8e4m3fn", "f8e5m2"])
def test_total_order_compare_becomes_integer_compare(direction, dtype):
    np_type = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
               "f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}[dtype]
    values = _special(np_type)
    a = np.repeat(values, len(values))
    b = np.tile(values, len(values))
    n = len(a)
    text = f"""
HloModule totalorder
ENTRY e {{
  a = {dtype}[{n}] parameter(0)
  b = {dtype}[{n}] parameter(1)
  ROOT c = pred[{n}] compare(a, b), direction={direction}, type=TOTALORDER
}}
"""
    before, after, printed = _expand(text, "comparison-expander", [a, b], f"""
        CHECK: bitcast-convert(
        CHECK: xor(
        CHECK: ROOT %_ = pred[{n}]{{0}} compare(%_, %_), direction={direction}
    """)
    assert "TOTALORDER" not in printed
    assert bits_equal(before.array, after.array)


# ---- batch-norm ------------------------------------------------------------------------------
def _bn_args(rng, shape=(4, 3, 5), feature=1):
    c = shape[feature]
    x = rng.standard_normal(shape).astype(np.float32) * 3 + 1
    return x, (rng.random(c) + 0.5).astype(np.float32), rng.standard_normal(c).astype(np.float32)


def test_batch_norm_training_expands_to_reductions():
    rng = np.random.default_rng(0)
    x, scale, offset = _bn_args(rng)
    text = """
HloModule bn
ENTRY e {
  x = f32[4,3,5] parameter(0)
  s = f32[3] parameter(1)
  o = f32[3] parameter(2)
  ROOT bn = (f32[4,3,5], f32[3], f32[3]) batch-norm-training(x, s, o), epsilon=0.001, feature_index=1
}
"""
    before, after, printed = _expand(text, "batch-norm-expander", [x, scale, offset], """
        CHECK-NOT: batch-norm
        CHECK: reduce(
        CHECK: rsqrt(
    """)
    assert _close(1e-4, 1e-5)(before, after), printed
    mean = x.astype(np.float64).mean(axis=(0, 2))
    assert np.allclose(after.flatten()[1], mean, rtol=1e-5)


def test_batch_norm_inference_and_grad_expand():
    rng = np.random.default_rng(1)
    x, scale, offset = _bn_args(rng, (2, 6, 7), feature=2)
    mean = rng.standard_normal(7).astype(np.float32)
    var = (rng.random(7) + 0.1).astype(np.float32)
    dy = rng.standard_normal((2, 6, 7)).astype(np.float32)
    text = """
HloModule bn2
ENTRY e {
  x = f32[2,6,7] parameter(0)
  s = f32[7] parameter(1)
  o = f32[7] parameter(2)
  m = f32[7] parameter(3)
  v = f32[7] parameter(4)
  dy = f32[2,6,7] parameter(5)
  inf = f32[2,6,7] batch-norm-inference(x, s, o, m, v), epsilon=0.01, feature_index=2
  g = (f32[2,6,7], f32[7], f32[7]) batch-norm-grad(x, s, m, v, dy), epsilon=0.01, feature_index=2
  ROOT t = (f32[2,6,7], (f32[2,6,7], f32[7], f32[7])) tuple(inf, g)
}
"""
    before, after, printed = _expand(text, "batch-norm-expander", [x, scale, offset, mean, var, dy])
    assert "batch-norm" not in printed
    assert _close(1e-4, 1e-4)(before, after), printed


# ---- rng-bit-generator ---------------------------------------------------------------------------
RNG = """
HloModule rng
ENTRY e {{
  s = u64[{n}] parameter(0)
  ROOT r = (u64[{n}], {out}) rng-bit-generator(s), algorithm={algo}
}}
"""
STATES = {2: np.array([0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFF0], np.uint64),
          3: np.array([42, 0xFFFFFFFFFFFFFFFE, 7], np.uint64)}


@pytest.mark.parametrize("algo", ["rng_three_fry", "rng_philox", "rng_default"])
@pytest.mark.parametrize("out", ["u32[7,13]", "u32[5,3]", "u32[]", "u32[9]", "u64[3,5]", "u8[5]",
                                 "u16[3,3]", "s32[4,2]", "f32[6]", "f16[3]", "s64[2]", "u32[0,3]"])
def test_rng_bit_generator_expansion_is_bit_exact(algo, out):
    n = 2
    text = RNG.format(n=n, out=out, algo=algo)
    before, after, printed = _expand(text, "rng-bit-generator-expander", [STATES[n]])
    assert "rng-bit-generator" not in printed
    assert all(bits_equal(a, b) for a, b in zip(before.flatten(), after.flatten(), strict=True))


@pytest.mark.parametrize("out", ["u32[10]", "u64[7]"])
def test_philox_with_a_three_word_state(out):
    text = RNG.format(n=3, out=out, algo="rng_philox")
    before, after, _ = _expand(text, "rng-bit-generator-expander", [STATES[3]])
    assert all(bits_equal(a, b) for a, b in zip(before.flatten(), after.flatten(), strict=True))


def test_chained_generators_advance_the_state_like_xla():
    text = """
HloModule chain
ENTRY e {
  s = u64[2] parameter(0)
  r1 = (u64[2], u32[4,4]) rng-bit-generator(s), algorithm=rng_three_fry
  s1 = u64[2] get-tuple-element(r1), index=0
  r2 = (u64[2], u32[4,4]) rng-bit-generator(s1), algorithm=rng_three_fry
  b1 = u32[4,4] get-tuple-element(r1), index=1
  b2 = u32[4,4] get-tuple-element(r2), index=1
  ROOT t = (u32[4,4], u32[4,4]) tuple(b1, b2)
}
"""
    before, after, _ = _expand(text, "rng-bit-generator-expander", [STATES[2]])
    assert all(bits_equal(a, b) for a, b in zip(before.flatten(), after.flatten(), strict=True))
    assert not np.array_equal(after.flatten()[0], after.flatten()[1])
