"""The pass framework: spec strings, JSON pipelines, the runner, dce and call inlining."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hloc.errors import InputError
from hloc.ir import Attrs, Computation, Module, Opcode, Shape
from hloc.passes import PassRunner, all_passes, parse_spec, spec_string
from hloc.passes.pipeline_file import load_pipeline_file, parse_pipeline_json
from hloc.passes.pipelines import PIPELINES, check_disabled, default_pipeline

F32 = Shape.array("f32", [4])


def build_call_module() -> Module:
    """entry(x) = call(helper, x) + x, with a dead negate; helper(y) = y * y."""
    m = Module("calls")
    helper = Computation("helper")
    y = helper.create(Opcode.PARAMETER, F32, name="y", attrs=Attrs(parameter_number=0))
    helper.root = helper.create(Opcode.MULTIPLY, F32, [y, y], name="sq")
    m.add_computation(helper)
    entry = Computation("main")
    x = entry.create(Opcode.PARAMETER, F32, name="x", attrs=Attrs(parameter_number=0))
    c = entry.create(Opcode.CALL, F32, [x], called=[helper], name="c")
    entry.create(Opcode.NEGATE, F32, [x], name="dead")
    entry.root = entry.create(Opcode.ADD, F32, [c, x], name="out")
    m.add_computation(entry, entry=True)
    return m


def test_spec_roundtrip_and_aliases():
    items = parse_spec("inline, dce{remove-computations=false}, fixpoint(dce,inline){max-iterations=3}")
    assert spec_string(items) == "call-inliner,dce{remove-computations=false},fixpoint(dce,call-inliner){max-iterations=3}"


@pytest.mark.parametrize("spec,fragment", [
    ("nosuchpass", "unknown pass 'nosuchpass'"),
    ("dce{bogus=1}", "pass 'dce' has no option 'bogus'"),
    ("dce{remove-computations=maybe}", "wants a bool"),
    ("dce,", "expected more input"),
    ("fixpoint(dce", "expected ')'"),
    ("dce dce", "unexpected 'dce'"),
    ("fusion{max-ops=0}", "option 'max-ops' of pass 'fusion' must be from 1 to 2147483647, got 0"),
    ("fusion{max-ops=-1}", "must be from 1 to 2147483647, got -1"),
    ("fusion{duplicate=-2}", "option 'duplicate' of pass 'fusion' must be from 0 to"),
    ("multi-output-fusion{max-sweeps=0}", "'max-sweeps' of pass 'multi-output-fusion' must be from 1 to"),
    ("fixpoint(dce){max-iterations=0}", "max-iterations must be a positive integer up to 65536, got '0'"),
    ("fixpoint(dce){max-iterations=x}", "max-iterations must be a positive integer up to 65536, got 'x'"),
])
def test_spec_errors(spec, fragment):
    with pytest.raises(InputError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(spec)


def test_pass_is_abstract_and_options_keep_one_default():
    from hloc.passes.base import Pass
    from hloc.passes.fusion.fusion import FusionPass

    with pytest.raises(TypeError, match="abstract"):
        Pass()  # type: ignore[abstract]
    assert parse_spec("fusion{max-ops=1,duplicate=0}")[0].spec() == "fusion{max-ops=1,duplicate=0}"
    assert FusionPass().max_ops == 256 and spec_string(parse_spec("fusion")) == "fusion"


def test_dce_and_inliner_preserve_semantics():
    import numpy as np

    from hloc.runtime.interpreter import evaluate

    m = build_call_module()
    x = np.arange(4, dtype=np.float32)
    before = evaluate(m, [x]).array.copy()
    runner = PassRunner(parse_spec("inline,dce"))
    assert runner.run(m)
    ops = [i.opcode for i in m.entry.instructions]
    assert Opcode.CALL not in ops and Opcode.NEGATE not in ops
    assert [c.name for c in m.computations] == ["main"]
    np.testing.assert_array_equal(evaluate(m, [x]).array, before)
    np.testing.assert_array_equal(before, x * x + x)
    assert runner.timings["call-inliner"].changes == 1
    assert not PassRunner(parse_spec("inline,dce")).run(m)  # idempotent


def test_disable_pass_skips_it():
    m = build_call_module()
    runner = PassRunner(parse_spec("inline,dce"), disabled=check_disabled(["inline"]))
    runner.run(m)
    assert any(i.opcode == Opcode.CALL for i in m.entry.instructions)
    with pytest.raises(InputError, match="unknown pass 'nope'"):
        check_disabled(["nope"])


def test_json_pipeline(tmp_path: Path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"version": 1, "passes": [
        "inline", {"pass": "dce", "options": {"remove-computations": False}},
        {"fixpoint": ["dce"], "max-iterations": 2}]}))
    assert spec_string(load_pipeline_file(str(path))) == \
        "call-inliner,dce{remove-computations=false},fixpoint(dce){max-iterations=2}"


@pytest.mark.parametrize("data,fragment", [
    ([], "top level must be an object"),
    ({"version": 2, "passes": []}, "'version' must be 1"),
    ({"version": 1, "passes": ["zzz"]}, "unknown pass 'zzz'"),
    ({"version": 1, "passes": [{"pass": "dce", "options": {"x": 1}}]}, "no option 'x'"),
    ({"version": 1, "passes": [{"fixpoint": ["dce"], "max-iterations": 0}]}, "positive integer"),
    ({"version": 1, "passes": [], "extra": 1}, "unknown key 'extra'"),
    ({"version": 1, "passes": [{"pass": "fusion", "options": {"max-ops": 0}}]},
     r"passes\[0\]: option 'max-ops' of pass 'fusion' must be from 1 to 2147483647, got 0"),
])
def test_json_pipeline_errors(data, fragment):
    with pytest.raises(InputError, match=fragment):
        parse_pipeline_json(data, "p.json")


def test_json_pipeline_bad_file(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_pipeline_file(str(bad))
    with pytest.raises(InputError, match="cannot read"):
        load_pipeline_file(str(tmp_path / "missing.json"))


def test_schema_agrees_with_loader(tmp_path: Path):
    jsonschema = pytest.importorskip("jsonschema")
    root = Path(__file__).resolve().parent.parent
    schema = json.loads((root / "schemas/pipeline.schema.json").read_text())
    assert schema == json.loads((root / "hloc/schemas/pipeline.schema.json").read_text())
    good = {"version": 1, "passes": ["dce", {"pass": "dce", "options": {"remove-computations": True}},
                                    {"fixpoint": ["dce"], "max-iterations": 3}]}
    jsonschema.validate(good, schema)
    parse_pipeline_json(good, "good.json")
    for bad in ({"version": 1}, {"version": 1, "passes": [{"pass": 3}]},
                {"version": 1, "passes": [{"fixpoint": "dce"}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
        with pytest.raises(InputError):
            parse_pipeline_json(bad, "bad.json")


def test_default_pipelines_name_registered_passes():
    registered = all_passes()
    for (target, level) in PIPELINES:
        for item in default_pipeline(target, level):
            names = [p.name for p in getattr(item, "passes", [item])]
            assert all(n in registered for n in names)
