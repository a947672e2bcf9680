"""`hloc compile`'s command line read without click (cli/compile_cmd.read_argv) agrees with
click's reading of the same line wherever it answers, answers for the common lines, and
leaves the rest (help, usage errors, options it does not read) to click."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from hloc.cli.compile_cmd import DEFAULTS, read_argv
from hloc.cli.main import cli

from .conftest import SAMPLES


def click_params(args: list[str]) -> dict | None:
    """The compile command's parameters as click reads `hloc compile ARGS`, or None where
    click refuses the line."""
    try:
        ctx = cli.make_context("hloc", ["compile", *args])
        sub = cli.get_command(ctx, "compile").make_context("compile", list(args), parent=ctx)
    except (SystemExit, Exception):  # usage errors, --help
        return None
    return dict(sub.params)


PIECES = [[], ["--no-cache"], ["-O0"], ["-O3"], ["--target", "interpreter"], ["--target=cuda"],
          ["--cuda-arch", "sm_90"], ["--cuda-arch", "sm_80", "--cuda-arch=sm_90a"],
          ["--cpu", "x86-64-v3"], ["--cpu-features", "+avx2,-avx512f"], ["--debug"],
          ["--passes", "dce,cse"], ["--disable-pass", "fusion", "--disable-pass", "cse"],
          ["--pipeline", "p.json"], ["--dump-dir", "d"], ["--dump-after=fusion.*"],
          ["--dump-format", "text,proto"], ["--stop-after", "buffers"], ["--time-passes"],
          ["--sign-key", "k.pem"], ["--output=x.bundle"], ["--cpu", ""]]


@pytest.mark.parametrize(("first", "second"), list(itertools.combinations(range(len(PIECES)), 2)))
def test_agrees_with_click(first, second):
    extra = PIECES[first] + PIECES[second]
    for args in (["m.pb", "-o", "out.bundle", *extra], [*extra, "--output", "o", "m.pb"],
                 ["-o", "b", *extra[:1], "m.pb", *extra[1:]]):
        mine = read_argv(args)
        names = [a.split("=")[0] for a in args if a.startswith("-")]
        once = [n for n in names if n not in ("--cuda-arch", "--disable-pass")]
        if len(set(once) - {"-o", "--output"}) + ("-o" in once or "--output" in once) < len(once):
            assert mine is None, args  # an option given twice: click's to settle
            continue
        assert mine is not None, args
        assert mine == click_params(args), args


@pytest.mark.parametrize("args", [
    ["m.pb"], ["-o", "x"], ["m.pb", "n.pb", "-o", "x"], ["m.pb", "-o"], ["m.pb", "-o", "--debug"],
    ["m.pb", "-o", "x", "-o", "y"], ["m.pb", "-ox"], ["m.pb", "-o", "x", "--help"], ["-h"],
    ["m.pb", "-o", "x", "--check-determinism", "2"], ["m.pb", "-o", "x", "--no-cache=1"],
    ["m.pb", "-o", "x", "--", "-weird.pb"], ["m.pb", "-o", "x", "--target"],
    ["m.pb", "-o", "x", "-O2", "-O2"], ["m.pb", "-o", "x", "--unknown"], ["m.pb", "-o", "x", "-O4"],
    ["m.pb", "-o", "x", "--cpu", "-v3"], ["m.pb", "-o", "x", "--no-cach"],
])
def test_leaves_the_rest_to_click(args):
    assert read_argv(args) is None


def test_defaults_are_clicks():
    assert read_argv(["m.pb", "-o", "x"]) == {**DEFAULTS, "model": "m.pb", "output": "x"}
    assert click_params(["m.pb", "-o", "x"]) == {**DEFAULTS, "model": "m.pb", "output": "x"}


def test_command_without_click_behaves_as_with_it(tmp_path):
    """The same bundle, the same error line and exit status either way."""
    env = {**os.environ, "HLOC_SERVER": "off", "HLOC_CACHE_DIR": "off"}

    def hloc(*args, via_click: bool):
        run = "hloc.cli.main" if via_click else "hloc.cli.entry"
        code = f"import sys; sys.argv = ['hloc', *sys.argv[1:]]; from {run} import main; main()"
        return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                              text=True, env=env, timeout=600)

    model = SAMPLES / "mlp.pb"
    runs = {via: hloc("compile", model, "-o", tmp_path / f"{via}.bundle", "--no-cache",
                      via_click=via) for via in (True, False)}
    assert all(r.returncode == 0 for r in runs.values()), runs
    assert (tmp_path / "True.bundle").read_bytes() == (tmp_path / "False.bundle").read_bytes()
    bad = tmp_path / "bad.pb"
    bad.write_bytes(model.read_bytes()[:100])
    errors = {via: hloc("compile", bad, "-o", tmp_path / "bad.bundle", via_click=via)
              for via in (True, False)}
    assert errors[True].returncode == errors[False].returncode == 2
    assert errors[True].stderr == errors[False].stderr
    assert errors[False].stderr.count("\n") == 1 and str(bad) in errors[False].stderr
    assert not (tmp_path / "bad.bundle").exists()
