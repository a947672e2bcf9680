"""Custom-call targets: the compiler and the runtime agree on which hloc runs; a compile
refuses any other (and LAPACK calls whose results do not fit), naming the model; a tampered
bundle with one is refused at load; a run-time error names the bundle."""

from __future__ import annotations

import re

import numpy as np
import pytest
from click.testing import CliRunner

from hloc.cli.main import cli as hloc_cli
from hloc.ir.custom_calls import SUPPORTED_TARGETS
from hloc.runtime.interpreter.control import CUSTOM_CALLS
from tests.trust_support import assert_refused_in_one_line, compile_text, members_of, repack

TOP_K = """HloModule top_k

greater {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT gt = pred[] compare(a, b), direction=GT
}

ENTRY main {
  x = f32[2,8] parameter(0)
  ROOT t = (f32[2,3], s32[2,3]) custom-call(x), custom_call_target="TopK", to_apply=greater
}
"""
UNKNOWN = """HloModule unknown

ENTRY main {
  x = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(x), custom_call_target="my_kernel"
}
"""
# A full SVD of a 4x3 matrix has a 4x4 U; this one claims 4x3.
BAD_SVD = """HloModule bad_svd

ENTRY main {
  a = f32[4,3] parameter(0)
  ROOT s = (f32[4,3], f32[3], f32[4,3], f32[3,3], s32[]) custom-call(a),
    custom_call_target="lapack_sgesdd_ffi", backend_config={mode = 65 : ui8}
}
"""
LOW_RANK_SVD = BAD_SVD.replace("a = f32[4,3] parameter(0)", "a = f32[4] parameter(0)")


def _lapack(target: str, operands: str, result: str) -> str:
    """A module of one LAPACK call: `operands` as 'f64[4,4] f64[4,1]', its `result` shape."""
    params = "\n".join(f"  p{i} = {t} parameter({i})" for i, t in enumerate(operands.split()))
    args = ", ".join(f"p{i}" for i in range(len(operands.split())))
    return (f"HloModule m\n\nENTRY main {{\n{params}\n  ROOT c = {result} custom-call({args}), "
            f'custom_call_target="{target}"\n}}\n')


# Every LAPACK call's results must fit its operands: LAPACK writes scratch arrays sized from
# the operands, and a result of other dims would be broadcast or cut when copied out.
BAD_LAPACK = [
    ("trsm_wide_result", _lapack("lapack_dtrsm_ffi", "f64[4,4] f64[4,1]", "f64[4,2]")),
    ("trsm_unfit_triangle", _lapack("lapack_strsm_ffi", "f32[3,3] f32[4,1]", "f32[4,1]")),
    ("potrf_not_square", _lapack("lapack_spotrf_ffi", "f32[4,3]", "(f32[4,3], s32[])")),
    ("getrf_pivots", _lapack("lapack_dgetrf_ffi", "f64[5,3]", "(f64[5,3], s32[5], s32[])")),
    ("geqrf_tau", _lapack("lapack_sgeqrf_ffi", "f32[2,6,4]", "(f32[2,6,4], f32[2,6])")),
    ("orgqr_result", _lapack("lapack_sorgqr_ffi", "f32[6,4] f32[4]", "f32[6,6]")),
    ("syevd_values", _lapack("lapack_ssyevd_ffi", "f32[5,5]", "(f32[5,5], f32[4], s32[])")),
]


def test_the_interpreter_runs_exactly_the_supported_targets():
    CUSTOM_CALLS.load()
    assert set(CUSTOM_CALLS.keys()) == SUPPORTED_TARGETS


def _compile(tmp_path, text: str, name: str):
    src, out = tmp_path / f"{name}.hlo", tmp_path / f"{name}.bundle"
    src.write_text(text)
    result = CliRunner().invoke(hloc_cli, ["compile", str(src), "-o", str(out), "--no-cache"])
    return result, src, out


@pytest.mark.parametrize("name,text,fragment", [
    ("unknown", UNKNOWN, "custom-call %c: unsupported target 'my_kernel'"),
    ("bad_svd", BAD_SVD, r"lapack_sgesdd_ffi with operands \[\[4, 3\]\] cannot have results"),
    ("low_rank_svd", LOW_RANK_SVD, r"lapack_sgesdd_ffi cannot take operands \[\[4\]\]"),
    *((name, text, r"lapack_[sd][a-z]+_ffi (with operands .* cannot have results|cannot take)")
      for name, text in BAD_LAPACK),
])
def test_compile_refuses_a_call_no_runtime_can_make(tmp_path, monkeypatch, name, text, fragment):
    monkeypatch.setenv("HLOC_SERVER", "off")
    result, src, out = _compile(tmp_path, text, name)
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and line.startswith(f"hloc: error: {src}: "), line
    assert re.search(fragment, line), line
    assert not out.exists()


def test_well_shaped_lapack_calls_compile(tmp_path, monkeypatch):
    """The same calls with the results their operands imply compile (the check is no
    blanket refusal)."""
    monkeypatch.setenv("HLOC_SERVER", "off")
    good = [_lapack("lapack_dtrsm_ffi", "f64[4,4] f64[4,2]", "f64[4,2]"),
            _lapack("lapack_spotrf_ffi", "f32[3,3]", "(f32[3,3], s32[])"),
            _lapack("lapack_dgetrf_ffi", "f64[5,3]", "(f64[5,3], s32[3], s32[])"),
            _lapack("lapack_sgeqrf_ffi", "f32[2,6,4]", "(f32[2,6,4], f32[2,4])"),
            _lapack("lapack_sorgqr_ffi", "f32[6,4] f32[4]", "f32[6,4]"),
            _lapack("lapack_ssyevd_ffi", "f32[5,5]", "(f32[5,5], f32[5], s32[])")]
    for i, text in enumerate(good):
        result, _, out = _compile(tmp_path, text, f"good{i}")
        assert result.exit_code == 0 and out.exists(), result.output


def test_hloc_ops_lists_the_targets():
    result = CliRunner().invoke(hloc_cli, ["ops"], catch_exceptions=False)
    line = next(ln for ln in result.output.splitlines() if ln.startswith("custom-call targets"))
    assert line.startswith(f"custom-call targets ({len(SUPPORTED_TARGETS)}): TopK, ")
    assert "lapack_sgesdd_ffi" in line and "lapack_zheevd_ffi" in line


def test_a_tampered_target_is_refused_at_load(tmp_path):
    """An attacker renames the TopK call (module.pb and thunks.json, hashes recomputed): the
    loader refuses it before running anything, in one line naming the bundle."""
    good = compile_text(tmp_path, TOP_K, "top_k")
    _, members = members_of(good)
    assert b"TopK" in members["module.pb"]
    swap = {name: members[name].replace(b"TopK", b"Evil") for name in ("module.pb", "thunks.json")}
    bad = repack(good, tmp_path / "evil.bundle", replace=swap)
    assert_refused_in_one_line(bad, "member module.pb: custom-call %t: unsupported target 'Evil'",
                               device="cpu")


def test_a_run_time_error_names_the_bundle(tmp_path, monkeypatch):
    """An error raised while the bundle runs that names no file of its own comes out as one
    line naming the bundle, exit 2."""
    from hloc.cli import run as run_cmd
    from hloc.errors import UnsupportedError

    bundle = compile_text(tmp_path, TOP_K, "top_k")
    np.save(tmp_path / "x.npy", np.arange(16, dtype=np.float32).reshape(2, 8))
    argv = [str(bundle), "--inputs", str(tmp_path / "x.npy")]
    ok = CliRunner().invoke(run_cmd.cli, argv)
    assert ok.exit_code == 0 and "15" in ok.output, ok.output

    def refuse(*args):
        raise UnsupportedError("refused for the test")
    monkeypatch.setattr(run_cmd, "_run_once", refuse)
    result = CliRunner().invoke(run_cmd.cli, argv)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"hlo-run: error: {bundle}: refused for the test"
