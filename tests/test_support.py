"""The test support itself: the checkers must fail on wrong input, the harness bundles must
be the bundles `hloc compile` writes, and the runner must catch a wrong result."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hloc.cli.main import cli as hloc_cli
from hloc.ir import PrimitiveType, dtypes
from hloc.ir.text.parser import parse_module

from .conftest import SAMPLES
from .support.bundles import compile_bundle
from .support.golden import bits_equal, filecheck
from .support.hlo import binary, unary
from .support.kernels import Compiled, check_hlo, entry_spec, reference
from .support.run import compare_with_interpreter
from .support.values import assert_matches, edge_values, random_inputs


def test_filecheck_itself():
    text = "a = add(x, y)\nb = mul(a, a)\nROOT c = neg(b)"
    filecheck(text, [("CHECK", "add("), ("CHECK-NEXT", "mul"), ("CHECK-NOT", "sub"),
                     ("CHECK", "ROOT {{\\w+}} = neg")])
    filecheck("ROOT %neg.1 = f32[] negate(%x.2)", [("CHECK", "ROOT %_ = f32[] negate(%_)")])
    filecheck(text, [("CHECK-DAG", "mul("), ("CHECK-DAG", "add("), ("CHECK", "neg")])
    for bad in ([("CHECK", "sub(")], [("CHECK", "mul"), ("CHECK-NEXT", "add")],
                [("CHECK-DAG", "add("), ("CHECK-DAG", "add("), ("CHECK", "neg")],
                [("CHECK-NOT", "mul"), ("CHECK", "neg")]):
        try:
            filecheck(text, bad)
        except AssertionError:
            continue
        raise AssertionError(f"{bad} should have failed")


def test_bits_equal_itself():
    assert bits_equal(np.array([np.nan, 1.0]), np.array([-np.nan, 1.0]))
    assert not bits_equal(np.array([0.0]), np.array([-0.0]))
    assert not bits_equal(np.array([1], np.int32), np.array([1], np.int64))


# ---- the CPU kernel harness -----------------------------------------------------------------

ADD = """
HloModule m
ENTRY e {
  a = f32[3,5] parameter(0)
  b = f32[3,5] parameter(1)
  ROOT c = f32[3,5] add(a, b)
}
"""


def test_harness_runs_and_compares():
    check_hlo(ADD)


def test_harness_detects_a_wrong_result():
    module = parse_module(ADD)
    spec = entry_spec(module)
    inputs = random_inputs(module.entry)
    got = Compiled([spec]).run(spec.name, inputs)[0]
    with pytest.raises(AssertionError):
        assert_matches(got + np.float32(1e-3), reference(module.entry, inputs)[0])


def test_edge_values_cover_specials():
    f = edge_values("f32")
    assert np.isnan(f).any() and np.isinf(f).any() and (f[np.isfinite(f)] != 0).any()
    assert edge_values("s8").min() == -128 and edge_values("u4").max() == 15
    assert PrimitiveType.F32 == dtypes.from_name("f32")


# ---- one bundle assembler ----------------------------------------------------------------------

@pytest.mark.cpu
@pytest.mark.parametrize("target", ["cpu", "cuda", "interpreter"])
def test_harness_bundle_is_the_cli_bundle(target, tmp_path):
    """compile_bundle (the test harnesses) and `hloc compile` build byte-identical bundles."""
    model = SAMPLES / "mlp.pb"
    cli = tmp_path / "cli.bundle"
    run = CliRunner().invoke(hloc_cli, ["compile", str(model), "-o", str(cli), "--target", target])
    assert run.exit_code == 0, run.output
    harness = compile_bundle(model, tmp_path / "harness.bundle", target=target)
    assert harness.read_bytes() == cli.read_bytes()


@pytest.mark.cpu
def test_text_and_module_inputs_differ_only_in_the_input_section(tmp_path):
    from hloc.bundle import read_bundle

    text = binary("add", "f32", 16)
    a = read_bundle(compile_bundle(text, tmp_path / "t.bundle")).manifest
    b = read_bundle(compile_bundle(parse_module(text), tmp_path / "m.bundle")).manifest
    assert a["input"]["form"] == "text" and b["input"]["form"] == "HloModuleProto"
    assert {k: v for k, v in a.items() if k != "input"} == \
        {k: v for k, v in b.items() if k != "input"}


# ---- the runner --------------------------------------------------------------------------------

@pytest.mark.cpu
@pytest.mark.parametrize("backend", ["cpu-kernels", "cpu", "cuda-emulated"])
def test_runner_compares_and_catches_a_wrong_result(backend, tmp_path):
    x = np.linspace(-3, 3, 8, dtype=np.float32)
    cases = {"neg": (unary("negate", "f32", 8), [x]), "add": (binary("add", "f32", 8), [x, x])}
    outcomes = compare_with_interpreter(cases, backend, tmp=tmp_path)
    assert set(outcomes) == {"neg", "add"}
    wrong = {"neg": (unary("negate", "f32", 8), [x])}
    outcomes["neg"].got[0] = outcomes["neg"].got[0] + np.float32(1)
    with pytest.raises(AssertionError):
        assert_matches(outcomes["neg"].got[0], outcomes["neg"].want[0])
    assert compare_with_interpreter(wrong, backend, tmp=tmp_path, bits=True)
