"""The command-line contract: exit codes, one-line errors, end-to-end compile → inspect → run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from hloc.cli.main import cli as hloc_cli
from hloc.cli.run import cli as run_cli

from .conftest import SAMPLES, require_samples

SAMPLE = "mlp"


def hloc(*args):
    return CliRunner().invoke(hloc_cli, [str(a) for a in args], catch_exceptions=False)


def hlo_run(*args):
    return CliRunner().invoke(run_cli, [str(a) for a in args], catch_exceptions=False)


def one_line_error(result, code: int, fragment: str) -> None:
    assert result.exit_code == code, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines, "expected an error line"
    assert "Traceback" not in result.output
    err = lines[-1]
    assert "error" in err and fragment in err, err


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    require_samples()
    out = tmp_path_factory.mktemp("b") / f"{SAMPLE}.bundle"
    r = hloc("compile", SAMPLES / f"{SAMPLE}.pb", "-o", out, "--target", "interpreter")
    assert r.exit_code == 0, r.output
    return out


def test_version():
    r = hloc("--version")
    assert r.exit_code == 0 and "hloc, version" in r.output


def test_verify_summary():
    require_samples()
    r = hloc("verify", SAMPLES / f"{SAMPLE}.pb")
    assert r.exit_code == 0
    assert "instructions:" in r.output and "dot" in r.output


def test_run_matches_xla(bundle):
    r = hlo_run(bundle, "--inputs", SAMPLES / f"{SAMPLE}.inputs.npz", "--expected", SAMPLES / f"{SAMPLE}.expected.npz")
    assert r.exit_code == 0, r.output
    assert "match" in r.output


def test_run_mismatch_exits_1(bundle, tmp_path):
    with np.load(SAMPLES / f"{SAMPLE}.expected.npz") as z:
        wrong = {k: z[k] + 1.0 for k in z.files}
    np.savez(tmp_path / "wrong.npz", **wrong)
    r = hlo_run(bundle, "--inputs", SAMPLES / f"{SAMPLE}.inputs.npz", "--expected", tmp_path / "wrong.npz")
    assert r.exit_code == 1
    assert "differ" in r.output


def test_output_and_report(bundle, tmp_path):
    out, rep = tmp_path / "o.npz", tmp_path / "r.json"
    r = hlo_run(bundle, "--inputs", SAMPLES / f"{SAMPLE}.inputs.npz", "--output", out, "--benchmark", 3, "--report", rep)
    assert r.exit_code == 0, r.output
    with np.load(out) as got, np.load(SAMPLES / f"{SAMPLE}.expected.npz") as exp:
        assert sorted(got.files) == sorted(exp.files)
        for k in exp.files:
            np.testing.assert_allclose(got[k], exp[k], rtol=1e-4, atol=1e-5)
    report = json.loads(rep.read_text())
    assert report["benchmark"]["n"] == 3
    assert report["benchmark"]["min_s"] <= report["benchmark"]["median_s"] <= report["benchmark"]["max_s"]
    # Memory: the bundle's arena sizes and the process's peak RSS, also shown with --benchmark.
    memory = report["memory"]
    manifest = json.loads(hloc("inspect", bundle, "--json").output)["memory"]
    assert {k: memory[k] for k in manifest} == manifest
    assert memory["peak_rss_bytes"] > memory["temp_bytes"] + memory["argument_bytes"] > 0
    assert f"memory: temp_bytes={memory['temp_bytes']} " in r.output


def test_profile_and_reference(bundle):
    r = hlo_run(bundle, "--inputs", SAMPLES / f"{SAMPLE}.inputs.npz", "--profile", "--reference")
    assert r.exit_code == 0, r.output
    assert "total ms" in r.output and "fusion" in r.output


def test_deterministic_bundles(tmp_path):
    require_samples()
    a, b = tmp_path / "a.bundle", tmp_path / "b.bundle"
    for out in (a, b):
        assert hloc("compile", SAMPLES / "attention.pb", "-o", out, "--target", "interpreter").exit_code == 0
    assert a.read_bytes() == b.read_bytes()


def test_inspect_json_and_extract(bundle, tmp_path):
    r = hloc("inspect", bundle, "--json", "--extract", tmp_path / "x")
    assert r.exit_code == 0, r.output
    info = json.loads(r.output[r.output.index("{"):])
    for key in ("format_version", "target", "entry", "memory", "thunks"):
        assert key in info
    assert set(info["memory"]) >= {"temp_bytes", "argument_bytes", "output_bytes", "constant_bytes"}
    assert info["entry"]["parameters"][0]["dtype"] == "f32"
    assert (tmp_path / "x" / "module.hlo").read_text().startswith("HloModule")


def test_dump_dir(tmp_path):
    require_samples()
    d = tmp_path / "dump"
    r = hloc("compile", SAMPLES / f"{SAMPLE}.pb", "-o", tmp_path / "o.bundle", "--target", "interpreter",
             "--dump-dir", d, "--dump-format", "text,proto,dot", "--dump-after", "dce|fusion")
    assert r.exit_code == 0, r.output
    index = json.loads((d / "index.json").read_text())
    files = [e["file"] for e in index["files"]]
    assert files[0].startswith("0000.") and files[0].endswith(".before_optimizations.hlo")
    assert any(".after_dce." in f for f in files)
    assert not any(".after_cse." in f for f in files)
    assert any(f.endswith(".dot") for f in files) and any(f.endswith(".pb") for f in files)
    for e in index["files"]:
        assert (d / e["file"]).exists()


def test_dump_env_var(tmp_path, monkeypatch):
    require_samples()
    monkeypatch.setenv("HLOC_DUMP_DIR", str(tmp_path / "envdump"))
    assert hloc("compile", SAMPLES / f"{SAMPLE}.pb", "-o", tmp_path / "o.bundle", "--target", "interpreter").exit_code == 0
    assert (tmp_path / "envdump" / "index.json").exists()


def test_opt_and_convert(tmp_path):
    require_samples()
    r = hloc("opt", SAMPLES / f"{SAMPLE}.pb", "--passes", "inline,dce")
    assert r.exit_code == 0 and r.output.startswith("HloModule")
    assert " call(" not in r.output
    assert hloc("convert", SAMPLES / f"{SAMPLE}.pb", "-o", tmp_path / "m.hlo").exit_code == 0
    assert hloc("convert", tmp_path / "m.hlo", "-o", tmp_path / "m.pb").exit_code == 0
    r1 = hloc("opt", tmp_path / "m.pb", "--passes", "dce")
    r2 = hloc("opt", SAMPLES / f"{SAMPLE}.pb", "--passes", "dce")
    assert r1.output == r2.output


def test_passes_lists_every_pass():
    from hloc.passes import all_passes

    r = hloc("passes")
    assert r.exit_code == 0
    for name in all_passes():
        assert name in r.output


# ---- bad input: one line, exit 2 -------------------------------------------------------------

def test_compile_missing_file(tmp_path):
    one_line_error(hloc("compile", tmp_path / "nope.pb", "-o", tmp_path / "o"), 2, "nope.pb")


def test_compile_garbage(tmp_path):
    bad = tmp_path / "bad.pb"
    bad.write_bytes(os.urandom(200))
    one_line_error(hloc("compile", bad, "-o", tmp_path / "o", "--target", "interpreter"), 2, "bad.pb")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args,fragment", [
    (["--passes", "nosuch"], "unknown pass 'nosuch'"),
    (["--passes", "dce{x=1}"], "no option 'x'"),
    (["--passes", "fusion{max-ops=0}"], "option 'max-ops' of pass 'fusion' must be from 1 to"),
    (["--disable-pass", "zzz"], "unknown pass 'zzz'"),
    (["--target", "tpu"], "unknown target 'tpu'"),
    (["-O1", "-O3"], "at most one"),
    (["--dump-format", "xml", "--dump-dir", "DUMP"], "bad --dump-format"),
    (["--stop-after", "never"], "unknown --stop-after"),
])
def test_compile_bad_flags(tmp_path, args, fragment):
    require_samples()
    args = [str(tmp_path / "d") if a == "DUMP" else a for a in args]
    target = [] if "--target" in args else ["--target", "interpreter"]
    one_line_error(hloc("compile", SAMPLES / f"{SAMPLE}.pb", "-o", tmp_path / "o", *target, *args), 2, fragment)


def test_bad_pipeline_json(tmp_path):
    require_samples()
    p = tmp_path / "p.json"
    p.write_text('{"version": 1, "passes": ["nosuch"]}')
    one_line_error(hloc("compile", SAMPLES / f"{SAMPLE}.pb", "-o", tmp_path / "o", "--target", "interpreter",
                        "--pipeline", p), 2, "unknown pass 'nosuch'")


def _corrupt(bundle: Path, tmp_path: Path, how: str) -> Path:
    data = bytearray(bundle.read_bytes())
    out = tmp_path / f"{how}.bundle"
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "flipped":
        data[len(data) // 2] ^= 0x40
    elif how == "magic":
        data[:8] = b"NOTABNDL"
    elif how == "empty":
        data = bytearray()
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("how,fragment", [
    ("truncated", ""), ("flipped", "corrupt"), ("magic", "magic"), ("empty", ""),
])
def test_run_bad_bundle(bundle, tmp_path, how, fragment):
    bad = _corrupt(bundle, tmp_path, how)
    one_line_error(hlo_run(bad, "--zero-inputs"), 2, fragment)


def test_run_newer_major(bundle, tmp_path):
    from hloc.bundle import format as fmt

    data = bytearray(bundle.read_bytes())
    header = fmt.Header.unpack(bytes(data))
    assert header.major == 1
    newer = tmp_path / "newer.bundle"
    import dataclasses

    data[: len(header.pack())] = dataclasses.replace(header, major=2).pack()
    newer.write_bytes(bytes(data))
    one_line_error(hlo_run(newer, "--zero-inputs"), 2, "newer")


def test_run_bad_inputs(bundle, tmp_path):
    with np.load(SAMPLES / f"{SAMPLE}.inputs.npz") as z:
        args = {k: z[k] for k in z.files}
    one_line_error(hlo_run(bundle), 2, "parameter")  # nothing given
    short = dict(args)
    short["arg6"] = short["arg6"][:, :5]
    np.savez(tmp_path / "shape.npz", **short)
    one_line_error(hlo_run(bundle, "--inputs", tmp_path / "shape.npz"), 2, "parameter 6")
    typed = dict(args)
    typed["arg6"] = typed["arg6"].astype(np.int32)
    np.savez(tmp_path / "dtype.npz", **typed)
    one_line_error(hlo_run(bundle, "--inputs", tmp_path / "dtype.npz"), 2, "parameter 6")
    np.savez(tmp_path / "names.npz", bogus=args["arg0"])
    one_line_error(hlo_run(bundle, "--inputs", tmp_path / "names.npz"), 2, "bogus")
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04garbage")
    one_line_error(hlo_run(bundle, "--inputs", tmp_path / "junk.npz"), 2, "junk.npz")
    one_line_error(hlo_run(bundle, "--inputs", tmp_path / "missing.npy"), 2, "missing.npy")


def test_run_random_inputs(bundle):
    r = hlo_run(bundle, "--random-inputs")
    assert r.exit_code == 0, r.output
    assert "out0" in r.output


def test_run_wrong_device(bundle):
    one_line_error(hlo_run(bundle, "--device", "cuda", "--zero-inputs"), 2, "cuda")


def test_console_scripts_installed(bundle):
    """The real entry points (not just click's runner) keep the contract."""
    exe = Path(sys.executable).parent
    r = subprocess.run([str(exe / "hlo-run"), str(bundle), "--inputs", "/nonexistent.npy"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    r = subprocess.run([str(exe / "hloc"), "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0


def test_snapshot_arguments_feed_hlo_run(tmp_path):
    """A bundle compiled from an HloSnapshot runs on the snapshot's own arguments."""
    require_samples()
    from hloc.frontend import load, make_snapshot
    from hloc.ir import Literal

    from .conftest import sample_arrays

    module = load(SAMPLES / f"{SAMPLE}.pb").module
    args = [Literal.from_array(a) for a in sample_arrays(SAMPLE, "inputs")]
    snap = tmp_path / "snap.pb"
    snap.write_bytes(make_snapshot(module, args, None))
    out = tmp_path / "snap.bundle"
    assert hloc("compile", snap, "-o", out, "--target", "interpreter").exit_code == 0
    r = hlo_run(out, "--expected", SAMPLES / f"{SAMPLE}.expected.npz")  # no --inputs
    assert r.exit_code == 0, r.output
    # An explicit input still wins over the snapshot's.
    with np.load(SAMPLES / f"{SAMPLE}.inputs.npz") as z:
        changed = {k: z[k] + 1.0 for k in z.files}
    np.savez(tmp_path / "other.npz", **changed)
    r = hlo_run(out, "--inputs", tmp_path / "other.npz", "--expected", SAMPLES / f"{SAMPLE}.expected.npz")
    assert r.exit_code == 1


@pytest.mark.parametrize("chosen", [None, "3"])
def test_compile_starts_one_blas_thread_unless_told_otherwise(tmp_path, chosen):
    """`hloc compile` in a fresh process sets OPENBLAS_NUM_THREADS=1 before NumPy loads (its
    thread pool costs CPU time a compile has no use for); a user's own setting stays."""
    require_samples()
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if chosen:
        env["OPENBLAS_NUM_THREADS"] = chosen
    code = ("import os, sys; from hloc.cli.main import cli\n"
            "try: cli(sys.argv[1:])\nexcept SystemExit as e: assert not e.code, e.code\n"
            "print(os.environ.get('OPENBLAS_NUM_THREADS'))")
    r = subprocess.run([sys.executable, "-c", code, "compile", str(SAMPLES / "donation.pb"),
                        "-o", str(tmp_path / "d.bundle"), "--stop-after", "passes"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == (chosen or "1")


# Modules a one-device CPU compile has no use for, imported lazily (issue 16: the command's
# start-up is most of a small module's compile time).
_NOT_FOR_A_COMPILE = ("hloc.cli.inspect_cmd", "hloc.cli.bisect_cmd", "hloc.cli.diff_cmd",
                      "hloc.collectives.execute", "hloc.collectives.sharding",
                      "hloc.bundle.reader", "hloc.bundle.signing", "hloc.codegen.elemental.dft",
                      "hloc.codegen.elemental.fmath64.log", "fractions",
                      "concurrent.futures")


def test_compile_imports_only_what_it_uses(tmp_path):
    require_samples()
    code = ("import sys; from hloc.cli.main import cli\n"
            "try: cli(sys.argv[1:])\nexcept SystemExit as e: assert not e.code, e.code\n"
            f"print(sorted(set({_NOT_FOR_A_COMPILE!r}) & set(sys.modules)))")
    r = subprocess.run([sys.executable, "-c", code, "compile", str(SAMPLES / "top_k.pb"),
                        "-o", str(tmp_path / "t.bundle"), "--no-cache"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[-2] == "[]"


def test_lazy_commands_and_exports_resolve():
    import hloc.bundle
    import hloc.collectives
    from hloc.cli.main import LazyGroup, cli

    for name in LazyGroup.LAZY:
        assert cli.get_command(click.Context(cli), name).name == name
    for package in (hloc.collectives, hloc.bundle):
        assert all(getattr(package, name) is not None for name in package.__all__)
    with pytest.raises(AttributeError):
        _ = hloc.collectives.no_such_name


def _hloc_main(*args, **kwargs) -> subprocess.CompletedProcess:
    """`python -m hloc.cli.main ARGS`: the real entry point, which ends without teardown."""
    return subprocess.run([sys.executable, "-m", "hloc.cli.main", *args], capture_output=True,
                          text=True, timeout=300, **kwargs)


def test_main_exits_without_teardown_but_keeps_the_contract(tmp_path):
    require_samples()
    out = tmp_path / "t.bundle"
    r = _hloc_main("compile", str(SAMPLES / "top_k.pb"), "-o", str(out), "--no-cache")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    r = _hloc_main("inspect", str(out), "--json")  # piped stdout: flushed before the exit
    assert r.returncode == 0 and json.loads(r.stdout)["target"]["kind"] == "cpu"
    r = _hloc_main("compile", str(tmp_path / "missing.pb"), "-o", str(out))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = _hloc_main("compile", "--no-such-flag")
    assert r.returncode == 2 and "no such option" in r.stderr.lower()


def test_exit_without_teardown_runs_atexit_and_maps_codes(tmp_path):
    code = ("import atexit, sys\nfrom hloc.cli.common import exit_without_teardown\n"
            "atexit.register(lambda: print('atexit ran'))\nsys.stdout.write('partial')\n"
            "exit_without_teardown(sys.argv[1] if sys.argv[1] != 'none' else None)\n")
    for arg, status in (("none", 0), ("message", 1)):
        r = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == status and r.stdout == "partialatexit ran\n", r
        assert r.stderr == ("message\n" if arg == "message" else "")


def test_run_compares_a_module_computing_in_bf16_with_bf16_tolerances(tmp_path):
    """f32 outputs of a module that rounds to bf16 on the way: --expected allows bf16 steps
    (and says so) unless tolerances are given."""
    text = ("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  h = bf16[4] convert(x)\n"
            "  ROOT y = f32[4] convert(h)\n}\n")
    (tmp_path / "m.hlo").write_text(text)
    out = tmp_path / "m.bundle"
    assert hloc("compile", tmp_path / "m.hlo", "-o", out).exit_code == 0
    x = np.array([1.0, 1.001, -3.0, 0.1], np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "want.npz", out0=x)  # the unrounded values: a bf16 step away
    r = hlo_run(out, "--inputs", tmp_path / "x.npy", "--expected", tmp_path / "want.npz")
    assert r.exit_code == 0, r.output
    assert "bf16 tolerances: computed in bf16" in r.output
    r = hlo_run(out, "--inputs", tmp_path / "x.npy", "--expected", tmp_path / "want.npz",
                "--rtol", "1e-5")
    assert r.exit_code == 1, r.output
