"""`hloc diff`: modules, bundles and dump directories compared; gates exit 1."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hloc.cli.main import cli as hloc_cli
from hloc.debug.diff import Gate, canonical_text
from hloc.ir.text.parser import parse_module

from .conftest import SAMPLES, require_samples

A = """HloModule a

ENTRY main {
  x = f32[8] parameter(0)
  y = f32[8] parameter(1)
  s = f32[8] add(x, y)
  ROOT e = f32[8] exponential(s)
}
"""

# The same computation with other names and another instruction order: no HLO diff.
A_RENAMED = """HloModule other_name

ENTRY entry_comp {
  second = f32[8] parameter(1)
  first = f32[8] parameter(0)
  sum.7 = f32[8] add(first, second)
  ROOT out = f32[8] exponential(sum.7)
}
"""

B = A.replace("ROOT e = f32[8] exponential(s)", "m = f32[8] multiply(s, s)\n  ROOT e = f32[8] exponential(m)")


def hloc(*args):
    return CliRunner().invoke(hloc_cli, [str(a) for a in args], catch_exceptions=False)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_canonical_names_hide_renaming():
    assert canonical_text(parse_module(A)) == canonical_text(parse_module(A_RENAMED))
    assert canonical_text(parse_module(A)) != canonical_text(parse_module(B))


def test_modules_json_and_gates(tmp_path):
    a, b = write(tmp_path, "a.hlo", A), write(tmp_path, "b.hlo", B)
    r = hloc("diff", a, write(tmp_path, "r.hlo", A_RENAMED), "--json", "--fail-on", "instructions>0")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["hlo_diff"] == "" and out["metrics"]["instructions"] == {"a": 4, "b": 4, "delta": 0}
    r = hloc("diff", a, b, "--json", "--fail-on", "instructions>0")
    assert r.exit_code == 1
    out = json.loads(r.output[: r.output.rindex("}") + 1])
    assert out["metrics"]["op:multiply"] == {"a": 0, "b": 1, "delta": 1}
    assert "+  %multiply.0 = f32[8]{0} multiply(%add.0, %add.0)" in out["hlo_diff"]
    assert out["gates"] == [{"gate": "instructions>0", "a": 4, "b": 5, "change": 1, "failed": True}]
    assert "gate(s) exceeded: instructions>0" in r.output
    # 1 more instruction out of 4 is 25%: under a 30% gate, over a 20% one.
    assert hloc("diff", a, b, "--fail-on", "instructions>30%").exit_code == 0
    assert hloc("diff", a, b, "--fail-on", "instructions>20%", "--fail-on", "op:add>0").exit_code == 1


@pytest.mark.parametrize("gate, fragment", [("instructions", "want METRIC>LIMIT"),
                                            ("bogus>1", "unknown metric"),
                                            ("temp_bytes>5%", "has no temp_bytes figures")])
def test_bad_gates_exit_2(tmp_path, gate, fragment):
    a = write(tmp_path, "a.hlo", A)
    r = hloc("diff", a, a, "--fail-on", gate)
    assert r.exit_code == 2 and fragment in r.output and "Traceback" not in r.output


def test_gate_parse():
    assert Gate.parse("temp_bytes>5%") == Gate("temp_bytes", 5.0, True)
    assert Gate.parse("thunks:kernel > 2") == Gate("thunks:kernel", 2.0, False)


def test_bundles_and_dump_dirs_stage_by_stage(tmp_path):
    require_samples()
    model = SAMPLES / "mlp.hlo"
    for level in ("-O1", "-O2"):
        r = hloc("compile", model, "-o", tmp_path / f"{level}.bundle", "--target", "interpreter",
                 level, "--dump-dir", tmp_path / level)
        assert r.exit_code == 0, r.output
    r = hloc("diff", tmp_path / "-O1.bundle", tmp_path / "-O2.bundle", "--json", "--no-hlo-diff")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["a"]["kind"] == "bundle" and "hlo_diff" not in out
    assert out["metrics"]["fusions"]["a"] == 0 and out["metrics"]["fusions"]["b"] > 0
    assert out["fusions"]["only_b"] and not out["fusions"]["only_a"]
    assert out["metrics"]["temp_bytes"]["a"] > 0 and out["metrics"]["thunks"]["b"] > 0
    r = hloc("diff", tmp_path / "-O1", tmp_path / "-O2", "--json", "--fail-on", "temp_bytes>1000%")
    assert r.exit_code == 0, r.output
    dumps = json.loads(r.output)
    assert dumps["a"]["kind"] == "dumps"
    assert dumps["metrics"]["temp_bytes"] == out["metrics"]["temp_bytes"]
    assert {k: v for k, v in dumps["metrics"].items() if k.startswith("thunks")} == \
        {k: v for k, v in out["metrics"].items() if k.startswith("thunks")}
    assert any(s["stage"] == "after_fusion" and s["a"] is None for s in dumps["stages"])
    text = hloc("diff", tmp_path / "-O1", tmp_path / "-O2").output
    assert "fusion only in B: kLoop" in text and "stage after_fusion" in text


def test_not_a_dump_dir_exit_2(tmp_path):
    r = hloc("diff", tmp_path, tmp_path)
    assert r.exit_code == 2 and "not a dump directory" in r.output
