"""`hlo-run --reference` tells rounding from error: outputs that differ from the f32 reference
interpreter beyond the default tolerance are judged against the reference's f64 shadow
(hloc/runtime/interpreter/shadow.py, tolerance.judge_rounding)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from hloc.cli.run import cli as run_cli
from hloc.ir import Opcode
from hloc.ir.dtypes import PrimitiveType as P
from hloc.ir.text.parser import parse_module
from hloc.runtime.interpreter import evaluate
from hloc.runtime.interpreter.shadow import ShadowUnavailable, shadow_module
from hloc.runtime.io import compare_arrays, judge_rounding

from .support.bundles import compile_bundle
from .support.hlo import reducer_text

# A long contraction: sums of 8192 products, many elements close to zero after cancellation,
# where f32 results from two summation orders differ by more than rtol 1e-4 allows.
DOT = """HloModule cancel

ENTRY main {
  a = f32[64,8192] parameter(0)
  b = f32[8192,96] parameter(1)
  ROOT d = f32[64,96] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

# f32 values whose bits matter (bitcast-convert both ways), a bf16 rounding step, a constant
# and a reduction: the shadow keeps the bit-level steps at their own types.
BITS = "HloModule bits\n" + reducer_text("add", name="add") + """
ENTRY main {
  a = f32[4,300] parameter(0)
  third = f32[] constant(0.333333343)
  t = f32[4,300] broadcast(third), dimensions={}
  m = f32[4,300] multiply(a, t)
  h = bf16[4,300] convert(m)
  w = f32[4,300] convert(h)
  z = f32[] constant(0)
  r = f32[4] reduce(w, z), dimensions={1}, to_apply=add
  u = u32[4] bitcast-convert(r)
  one = u32[] constant(1)
  ones = u32[4] broadcast(one), dimensions={}
  v = u32[4] or(u, ones)
  ROOT f = f32[4] bitcast-convert(v)
}
"""


def _run(*args):
    return CliRunner().invoke(run_cli, [str(a) for a in args], catch_exceptions=False)


def test_shadow_widens_values_and_keeps_bit_steps():
    module = shadow_module(parse_module(BITS))
    by_name = {i.name: i for c in module.computations for i in c.instructions}
    assert by_name["m"].shape.element_type == P.F64
    assert by_name["h"].shape.element_type == P.F64  # bf16 carried in f64 too
    assert by_name["third"].literal.array.dtype == np.float64
    assert by_name["third"].literal.array == np.float32(0.333333343)  # the f32 value, exactly
    first = by_name["u"]
    assert first.opcode == Opcode.BITCAST_CONVERT
    assert first.operand(0).opcode == Opcode.CONVERT  # narrowed back to f32 before the bits
    assert first.operand(0).shape.element_type == P.F32
    root = module.entry.root
    assert root.opcode == Opcode.CONVERT and root.shape.element_type == P.F64
    assert root.operand(0).shape.element_type == P.F32

    a = np.random.default_rng(1).standard_normal((4, 300)).astype(np.float32)
    got = evaluate(module, [a]).flatten()[0]
    exact = (a.astype(np.float64) * np.float64(np.float32(0.333333343))).sum(axis=1)
    bits = exact.astype(np.float32).view(np.uint32) | np.uint32(1)
    np.testing.assert_array_equal(got, bits.view(np.float32).astype(np.float64))


def test_shadow_refuses_a_tuple_through_a_kept_instruction():
    text = """HloModule cc

ENTRY main {
  a = f32[8] parameter(0)
  ROOT c = (f32[8], f32[8]) custom-call(a), custom_call_target="opaque"
}
"""
    with pytest.raises(ShadowUnavailable, match="custom-call c returns a tuple"):
        shadow_module(parse_module(text))


def _judged(actual, reference, exact):
    strict = compare_arrays([actual], [reference])
    return strict, judge_rounding([actual], [reference], [exact], strict)


def test_judge_allows_rounding_of_the_references_size_only():
    rng = np.random.default_rng(0)
    exact = rng.standard_normal(1000) * 1e3
    noise = rng.standard_normal(1000) * 1e-2
    reference = (exact + noise).astype(np.float32)
    own = float(np.abs(reference.astype(np.float64) - exact).max())
    close = (exact + 2 * noise).astype(np.float32)
    strict, (rep, warnings) = _judged(close, reference, exact)
    assert not strict.ok and rep.ok and not warnings
    assert "reference's own rounding error is up to" in rep.checks[0].note
    assert rep.checks[0].atol == pytest.approx(1e-5 + 4 * own)

    wrong = close.copy()
    wrong[17] += 10 * own  # an error ten times the reference's own: not rounding
    _, (rep, _) = _judged(wrong, reference, exact)
    assert not rep.ok and rep.checks[0].mismatches == 1
    assert rep.checks[0].first_mismatch == (17,)


def test_judge_keeps_non_finite_rules_and_warns_when_ill_conditioned():
    exact = np.array([1.0, 2.0, np.inf, 4.0])
    reference = np.array([1.5, 2.0, np.inf, 4.0], np.float32)
    actual = np.array([0.6, 2.0, np.inf, 4.0], np.float32)
    strict, (rep, warnings) = _judged(actual, reference, exact)
    assert not strict.ok and rep.ok
    assert warnings and "ill-conditioned" in warnings[0]
    actual[2] = np.nan  # the reference has +inf there
    assert not _judged(actual, reference, exact)[1][0].ok


@pytest.fixture(scope="module")
def dot_bundle(tmp_path_factory):
    return compile_bundle(DOT, tmp_path_factory.mktemp("rounding") / "dot.bundle")


def test_reference_passes_rounding_and_catches_an_error(dot_bundle, tmp_path):
    report = tmp_path / "r.json"
    result = _run(dot_bundle, "--random-inputs", "--reference", "--report", report)
    assert result.exit_code == 0, result.output
    verdict = json.loads(report.read_text())["reference"]
    assert verdict["ok"]
    if not verdict["strict_ok"]:  # the usual case: two summation orders differ
        assert "vs f64" in result.output

    # An error a thousand times f32's epsilon in the one thunk: far beyond rounding.
    result = _run(dot_bundle, "--random-inputs", "--reference", "--perturb", "d=1e-4")
    assert result.exit_code == 1, result.output
    assert "MISMATCH" in result.output and "vs f64" in result.output


def test_explicit_tolerances_keep_the_strict_comparison(dot_bundle):
    result = _run(dot_bundle, "--random-inputs", "--reference", "--perturb", "d=1e-4",
                  "--rtol", "1e-4", "--atol", "1e-5")
    assert result.exit_code == 1
    assert "vs f64" not in result.output


def test_warns_when_the_reference_has_no_finite_value(tmp_path):
    text = """HloModule nan

ENTRY main {
  a = f32[16] parameter(0)
  s = f32[16] multiply(a, a)
  n = f32[16] negate(s)
  one = f32[] constant(1)
  ones = f32[16] broadcast(one), dimensions={}
  m = f32[16] subtract(n, ones)
  ROOT r = f32[16] sqrt(m)
}
"""
    bundle = compile_bundle(text, tmp_path / "nan.bundle")
    result = _run(bundle, "--random-inputs", "--reference")
    assert result.exit_code == 0, result.output
    assert "out0 has no finite value in the reference" in result.output


def test_localize_charges_no_thunk_with_rounding_only(dot_bundle):
    result = _run(dot_bundle, "--random-inputs", "--localize")
    assert result.exit_code == 0, result.output
    assert "no thunk diverges" in result.output
    result = _run(dot_bundle, "--random-inputs", "--localize", "--perturb", "d=1e-3")
    assert result.exit_code == 1, result.output
    assert "first divergent thunk: d" in result.output
    # The strict rule (explicit tolerances) flags the rounding of this 8192-term dot.
    strict = _run(dot_bundle, "--random-inputs", "--localize", "--rtol", "1e-4", "--atol", "1e-5")
    verdict = _run(dot_bundle, "--random-inputs", "--reference", "--rtol", "1e-4", "--atol", "1e-5")
    assert (strict.exit_code == 1) == (verdict.exit_code == 1)
