"""Issue 17: deep nesting, huge shapes, absurd options and lying .npy headers give exit 2.

Limits (hloc.ir.limits, hloc.passes.spec): computations nest at most 64 deep, shapes fit in
int64, fixpoints nest at most 16 deep; `hloc verify` and `hloc compile` agree on all of them.
"""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from hloc.errors import InputError
from hloc.frontend import load_bytes
from hloc.ir.limits import MAX_CALL_DEPTH
from hloc.passes.pipeline_file import parse_pipeline_json
from hloc.passes.spec import MAX_NESTING, parse_spec
from hloc.runtime.io import read_arrays, read_outputs

pytestmark = pytest.mark.cpu


def nested_calls(depth: int) -> str:
    """A module whose entry reaches the innermost computation through `depth` computations."""
    parts = ["HloModule deep\n", "c0 {\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] add(p, p)\n}\n"]
    for i in range(1, depth - 1):
        parts.append(f"c{i} {{\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] call(p), to_apply=c{i - 1}\n}}\n")
    parts.append(f"ENTRY main {{\n  a = f32[4] parameter(0)\n  ROOT r = f32[4] call(a), to_apply=c{depth - 2}\n}}\n")
    return "\n".join(parts)


def _hloc(*args):
    """Run `hloc ARGS` in-process; (exit code, output)."""
    from click.testing import CliRunner

    from hloc.cli.main import cli

    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r.exit_code, r.output


def _one_line_exit_2(result, *fragments: str) -> None:
    code, output = result
    assert code == 2, output
    assert output.count("\n") == 1 and "Traceback" not in output, output
    for fragment in fragments:
        assert fragment in output, output


def test_call_depth_at_the_limit_loads_and_one_more_is_refused():
    load_bytes(nested_calls(MAX_CALL_DEPTH).encode())
    with pytest.raises(InputError, match=f"nest {MAX_CALL_DEPTH + 1} deep"):
        load_bytes(nested_calls(MAX_CALL_DEPTH + 1).encode(), "deep.hlo")


def test_proto_form_is_refused_too():
    from hloc.frontend.proto_export import module_to_proto
    from hloc.ir.text.parser import parse_module

    module = parse_module(nested_calls(MAX_CALL_DEPTH + 1))  # the parser itself has no limit
    with pytest.raises(InputError, match="nest"):
        load_bytes(module_to_proto(module).SerializeToString(), "deep.pb")


def test_verify_and_compile_agree_on_1000_nested_calls(tmp_path):
    src = tmp_path / "deep.hlo"
    src.write_text(nested_calls(1000))
    for args in (("verify", src), ("compile", src, "-o", tmp_path / "deep.bundle")):
        _one_line_exit_2(_hloc(*args), str(src), "nest 1000 deep")
    assert not (tmp_path / "deep.bundle").exists()


def test_compile_and_run_twice_as_deep_as_the_limit_without_inlining():
    """The still-recursive walks (thunk programs, printers, interpreter) have room to spare."""
    from hloc.ir.text.parser import parse_module
    from hloc.ir.text.printer import print_module
    from hloc.runtime.interpreter import evaluate

    module = parse_module(nested_calls(2 * MAX_CALL_DEPTH))
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(evaluate(module, [x]).array, x + x)
    assert "to_apply=%c0" in print_module(module)


@pytest.mark.parametrize("shape", ["f32[4294967296,4294967296]", "f32[99999999999999999999999]",
                                   "f64[2305843009213693952]"])
def test_shapes_beyond_int64_are_refused(shape):
    text = f"HloModule big\nENTRY main {{\n  ROOT a = {shape} parameter(0)\n}}\n"
    with pytest.raises(InputError, match="instruction a: shape has"):
        load_bytes(text.encode(), "big.hlo")


@pytest.mark.parametrize("spec,fragment", [
    ("fusion{max-ops=-1}", "must be from 1 to"),
    ("constant-folding{max-elements=99999999999999}", "must be from 0 to"),
    ("fixpoint(dce){max-iterations=abc}", "positive integer"),
    ("fixpoint(dce){max-iterations=0}", "positive integer"),
    ("fixpoint(" * 10_000 + "dce" + ")" * 10_000, f"nest more than {MAX_NESTING} deep"),
])
def test_absurd_pass_specs(spec, fragment):
    with pytest.raises(InputError, match=fragment) as info:
        parse_spec(spec)
    assert len(str(info.value)) < 300


def test_deep_pipeline_files():
    doc: list = []
    inner = doc
    for _ in range(MAX_NESTING + 1):
        inner.append({"fixpoint": []})
        inner = inner[0]["fixpoint"]
    inner.append("dce")
    with pytest.raises(InputError, match="nest more than"):
        parse_pipeline_json({"version": 1, "passes": doc}, "p.json")
    with pytest.raises(InputError, match="must be from [01] to"):
        parse_pipeline_json({"version": 1, "passes": [{"pass": "fusion", "options": {"max-ops": -5}}]}, "p.json")


def test_deep_pipeline_json_on_the_command_line(tmp_path):
    deep = tmp_path / "p.json"
    deep.write_text('{"version": 1, "passes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    src = tmp_path / "m.hlo"
    src.write_text(nested_calls(3))
    r = _hloc("compile", src, "-o", tmp_path / "m.bundle", "--pipeline", deep)
    _one_line_exit_2(r, str(deep))


def _lying_npy(shape=(10**6, 10**6)) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return out.getvalue() + b"\0" * 16


def test_npy_header_claiming_10_12_elements_is_refused_at_once(tmp_path):
    npy = tmp_path / "x.npy"
    npy.write_bytes(_lying_npy())
    npz = tmp_path / "x.npz"
    with zipfile.ZipFile(npz, "w") as zf:
        zf.writestr("out0.npy", _lying_npy())
    for path in (npy, npz):
        with pytest.raises(InputError, match="declares 1000000000000 elements"):
            read_arrays(str(path))
    with pytest.raises(InputError, match="declares"):
        read_outputs(str(npz))


def test_expected_file_is_bounded_by_the_outputs(tmp_path):
    from hloc.runtime.io import compare_outputs

    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        payload = io.BytesIO()
        np.save(payload, np.zeros(2_000_000, np.float32))
        zf.writestr("out0.npy", payload.getvalue())
    with pytest.raises(InputError, match="refused before reading"):
        compare_outputs([np.zeros(4, np.float32)], str(bomb))


@pytest.mark.parametrize("flags,fragment", [
    (["--rtol", "-1"], "--rtol"), (["--atol", "nan"], "--atol"), (["--benchmark", "-5"], "--benchmark"),
    (["--timeout", "0"], "--timeout"), (["--max-memory", "-1"], "--max-memory"),
])
def test_absurd_run_flags(tmp_path, flags, fragment):
    from click.testing import CliRunner

    from hloc.cli.run import cli

    bundle = tmp_path / "none.bundle"
    bundle.write_bytes(b"")
    r = CliRunner().invoke(cli, [str(bundle), "--zero-inputs", *flags])
    assert r.exit_code == 2, r.output
    assert fragment in r.output or fragment in str(getattr(r, "stderr", "")), r.output
