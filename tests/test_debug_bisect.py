"""`hloc bisect`: a pass made to miscompile on purpose is found, by both predicates."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from hloc.cli.main import cli as hloc_cli
from hloc.ir import Module, Opcode
from hloc.passes import base as pass_base
from hloc.passes.base import Pass, register_pass

MODULE = """HloModule bisect_me

ENTRY main {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  s = f32[4] add(a, b)
  m = f32[4] multiply(s, b)
  ROOT r = f32[4] add(m, a)
}
"""


@dataclass
class FlipAdd(Pass):
    """Test only: turns every add of the entry computation into a subtract (a miscompile)."""

    name = "test-flip-add"

    def run(self, module: Module) -> bool:
        adds = [i for i in module.entry.instructions if i.opcode == Opcode.ADD]
        for instr in adds:
            instr.opcode = Opcode.SUBTRACT
        return bool(adds)


@pytest.fixture(scope="module", autouse=True)
def broken_pass():
    register_pass(FlipAdd)
    yield
    # Keep the registry as other tests expect it (`hloc passes` lists real passes only).
    pass_base.PASSES.remove(FlipAdd.name)


def hloc(*args):
    return CliRunner().invoke(hloc_cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "m.hlo"
    path.write_text(MODULE)
    return path


def bisect_json(model, tmp_path, *extra):
    r = hloc("bisect", model, "--target", "interpreter", "--repro-dir", tmp_path / "repro", "--json", *extra)
    return r, (json.loads(r.output[: r.output.rindex("}") + 1]) if "{" in r.output else None)


def test_default_predicate_finds_the_broken_pass(model, tmp_path):
    r, out = bisect_json(model, tmp_path, "--passes", "call-inliner,dce,test-flip-add,cse,dce")
    assert r.exit_code == 0, r.output
    assert out["first_bad_pass"] == "test-flip-add" and out["index"] == 2
    assert out["verdict"] == "found" and "reference interpreter" in out["detail"]
    assert [t["prefix"] for t in out["passes_tried"]][:2] == [0, 5]
    assert "subtract" in out["diff"]
    repro = tmp_path / "repro"
    for name in ("original.hlo", "before.hlo", "after.hlo", "inputs.npz", "expected.npz", "flags.json"):
        assert (repro / name).exists(), name
    flags = json.loads((repro / "flags.json").read_text())
    assert flags["hloc_version"] and "test-flip-add" in flags["reproduce"][0]


def test_script_predicate_and_fixpoint_flattening(model, tmp_path):
    # exit 0 = good: the module text has no subtract yet.
    r, out = bisect_json(model, tmp_path, "--passes", "call-inliner,fixpoint(dce,test-flip-add),dce",
                         "--script", "! grep -q subtract")
    assert r.exit_code == 0, r.output
    assert out["pipeline"] == ["call-inliner", "dce", "test-flip-add", "dce", "test-flip-add", "dce"]
    assert out["first_bad_pass"] == "test-flip-add" and out["index"] == 2
    assert out["group"] == "fixpoint 1, iteration 1"


def test_human_output_names_pass_and_diff(model, tmp_path):
    r = hloc("bisect", model, "--target", "interpreter", "--passes", "dce,test-flip-add",
             "--repro-dir", tmp_path / "r")
    assert r.exit_code == 0, r.output
    assert "first bad pass: #1 test-flip-add" in r.output
    assert "-  %s = f32[4]{0} add(%a, %b)" in r.output and "+  %s = f32[4]{0} subtract(%a, %b)" in r.output


def test_no_failure_and_already_failing_exit_1(model, tmp_path):
    r, out = bisect_json(model, tmp_path, "--passes", "call-inliner,cse,dce")
    assert r.exit_code == 1 and out["verdict"] == "no-failure" and out["first_bad_pass"] is None
    assert "holds after every pass" in r.output
    r, out = bisect_json(model, tmp_path, "--passes", "dce", "--script", "grep -q subtract")
    assert r.exit_code == 1 and out["verdict"] == "fails-without-passes"
    assert "already fails without any pass" in r.output


def test_sample_at_O2_with_script(tmp_path):
    from .conftest import SAMPLES, require_samples

    require_samples()
    # A script that only fails once fusion has run: bisect must blame the fusion pass.
    r, out = bisect_json(SAMPLES / "mlp.hlo", tmp_path, "-O2", "--script", "! grep -q ' fusion('")
    assert r.exit_code == 0, r.output
    assert out["first_bad_pass"].startswith("fusion")
    assert out["pipeline"][out["index"]] == out["first_bad_pass"]


def test_bad_usage_exit_2(model, tmp_path):
    r = hloc("bisect", model, "--passes", "no-such-pass", "--repro-dir", tmp_path / "r")
    assert r.exit_code == 2 and "unknown pass" in r.output and "Traceback" not in r.output
    r = hloc("bisect", tmp_path / "missing.hlo")
    assert r.exit_code == 2

