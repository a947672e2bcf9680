"""Golden tests for float normalization (narrow-float arithmetic computed as XLA CPU does)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hloc.errors import InputError
from hloc.frontend import load
from hloc.ir.text.parser import parse_module
from hloc.runtime.interpreter import evaluate

from .conftest import SAMPLES, sample_arrays, sample_meta, sample_names
from .support.golden import bits_equal, golden
from .support.hlo import run_passes

pytestmark = pytest.mark.pure
BF16 = ml_dtypes.bfloat16


def test_each_operand_is_widened_once():
    _, printed = golden("""
HloModule once
ENTRY e {
  a = bf16[8] parameter(0)
  x = bf16[8] multiply(a, a)
  y = bf16[8] add(a, a)
  ROOT t = (bf16[8], bf16[8]) tuple(x, y)
}
""", "float-normalization")
    assert printed.count("convert(%a)") == 1


def test_f16_elementwise_stays_native_but_dots_widen():
    _, printed = golden("""
HloModule h
ENTRY e {
  a = f16[4,4] parameter(0)
  n = f16[4,4] minimum(a, a)
  ROOT d = f16[4,4] dot(n, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""", "float-normalization", """
        CHECK: %n = f16[4,4]{1,0} minimum(%a, %a)
        CHECK: f32[4,4]{1,0} dot(
        CHECK: ROOT %_ = f16[4,4]{1,0} convert(%d)
    """)


def test_data_movement_and_reductions_stay_narrow():
    module, printed = golden("""
HloModule moves
add_bf16 {
  x = bf16[] parameter(0)
  y = bf16[] parameter(1)
  ROOT s = bf16[] add(x, y)
}
ENTRY e {
  a = bf16[4,6] parameter(0)
  t = bf16[6,4] transpose(a), dimensions={1,0}
  z = bf16[] constant(0)
  r = bf16[6] reduce(t, z), dimensions={1}, to_apply=add_bf16
  ROOT c = pred[6] compare(r, r), direction=LT
}
""", "float-normalization", """
        CHECK: %s = f32[] add(
        CHECK: ENTRY
        CHECK: %t = bf16[6,4]{1,0} transpose(%a)
        CHECK: %r = bf16[6]{0} reduce(%t, %z)
        CHECK: compare(%_, %_), direction=LT
    """)
    assert "bf16[] convert(%s)" in printed  # the reducer still rounds every step to bf16


def test_explicit_widening_convert_reads_the_unrounded_value_like_xla():
    # Recorded from XLA CPU (jax 0.10, jit(lambda x: (x * x).astype(f32))): no bf16 rounding
    # of the product survives, so 1.1015625**2 comes out as 1.21344 and not bf16's 1.2109375.
    text = """
HloModule quirk
ENTRY e {
  x = bf16[3] parameter(0)
  m = bf16[3] multiply(x, x)
  ROOT c = f32[3] convert(m)
}
"""
    x = np.array([1.0039062, 3.0078125, 1.1], BF16)
    module = parse_module(text)
    unoptimized = evaluate(module, [x]).array
    run_passes(module, "float-normalization")
    got = evaluate(module, [x]).array
    wide = x.astype(np.float32)
    assert np.array_equal(got, wide * wide)
    assert got[2] == np.float32(1.21343994140625) and unoptimized[2] == np.float32(1.2109375)
    module = parse_module(text)
    run_passes(module, "float-normalization{xla-convert-folding=false}")
    assert np.array_equal(evaluate(module, [x]).array, unoptimized)


def test_bad_f8_compute_type_is_an_input_error():
    module = parse_module("HloModule m\nENTRY e {\n  ROOT a = f32[] parameter(0)\n}\n")
    with pytest.raises(InputError, match="f8-compute"):
        run_passes(module, "float-normalization{f8-compute=f64}")


_NARROW = {"bf16", "f16", "f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4"}
NARROW_SAMPLES = [n for n in sample_names() + sample_names("ops")
                  if any(o["dtype"] in _NARROW for o in sample_meta(n)["outputs"])]


@pytest.mark.parametrize("name", NARROW_SAMPLES)
def test_narrow_float_outputs_stay_bit_exact_with_xla(name):
    """Every narrow-float output the interpreter reproduces bit for bit from the unoptimized
    module must still match XLA's bits after normalization."""
    module = load(SAMPLES / f"{name}.pb").module
    args = sample_arrays(name, "inputs")
    expected = sample_arrays(name, "expected")
    before = evaluate(module, args).flatten()
    run_passes(module, "float-normalization")
    after = evaluate(module, args).flatten()
    narrow = [i for i, o in enumerate(sample_meta(name)["outputs"]) if o["dtype"] in _NARROW]
    exact_before = [i for i in narrow if bits_equal(before[i], expected[i])]
    assert [i for i in exact_before if not bits_equal(after[i], expected[i])] == []


def test_narrow_contractions_converted_wide_are_read_like_xla():
    """XLA CPU's convert folding covers dots too: a bf16 dot converted to f32 (output 0) and
    an f8 dot converted to f16 (output 3) come out unrounded, the latter rounded to f16 only,
    where an f16 dot (5), or an f8 dot converted to f32 (4), round to their own type first.
    The sums run in another order than XLA's, so the check is the error: far below the
    narrow type's rounding with folding, at that rounding without it."""
    name = "ops/narrow_contraction_converts"
    args, expected = sample_arrays(name, "inputs"), sample_arrays(name, "expected")

    def errors(spec):
        module = load(SAMPLES / f"{name}.pb").module
        run_passes(module, spec)
        got = evaluate(module, args).flatten()
        return [float(np.max(np.abs(got[i].astype(np.float64) - expected[i])
                             / np.abs(expected[i].astype(np.float64)))) for i in (0, 3)]

    bf16_dot, f8_dot = errors("float-normalization")
    assert bf16_dot < 1e-5 and f8_dot <= 2 ** -11
    bf16_dot, f8_dot = errors("float-normalization{xla-convert-folding=false}")
    assert bf16_dot > 2 ** -10 and f8_dot > 2 ** -6
