"""`hloc compile --check-determinism N`: compile N times, in separate processes with different
PYTHONHASHSEED values, dumping every stage, and name the first stage whose output differs.

Each run is `python -m hloc.cli.main compile` with the same flags, its own `--dump-dir` and
bundle. Runs are compared with the first: the dump files in order (by content hash, as listed
in each index.json; timings are ignored), then the bundles member by member. The dumps are kept
under `--dump-dir DIR` (DIR/run0, DIR/run1, ...) when one is given.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import click

import hloc

from ..errors import CheckFailed, HlocError, InputError
from ..util.record import dataclass

# compile's own options that the runs set themselves (or that make no sense per run).
_NOT_PASSED = {"output", "dump_dir", "dump_after", "check_determinism", "time_passes"}


def compile_argv(command: click.Command, params: dict) -> list[str]:
    """The compile command line that gave `params`, less the options in _NOT_PASSED."""
    argv: list[str] = []
    for p in command.params:
        value = params.get(p.name)
        if p.name in _NOT_PASSED or value is None or value == () or value is False:
            continue
        if isinstance(p, click.Argument):
            argv.append(str(value))
        elif getattr(p, "is_flag", False):
            argv.append(p.opts[0])
        elif value != p.default:
            argv += [x for v in (value if p.multiple else [value]) for x in (p.opts[0], str(v))]
    return argv


@dataclass(frozen=True)
class Run:
    """One compile: its hash seed and where its bundle and dumps went."""

    seed: int
    bundle: str
    dumps: str


def _child_env(seed: int) -> dict[str, str]:
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    env.pop("HLOC_DUMP_DIR", None)  # each run gets its own --dump-dir
    root = os.path.dirname(os.path.dirname(os.path.abspath(hloc.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _compile(argv: list[str], run: Run) -> None:
    cmd = [sys.executable, "-m", "hloc.cli.main", "compile", *argv, "-o", run.bundle,
           "--dump-dir", run.dumps]
    done = subprocess.run(cmd, env=_child_env(run.seed), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()] or ["(no message)"]
        error = HlocError(f"compile with PYTHONHASHSEED={run.seed} failed: {lines[-1]}")
        error.exit_code = done.returncode if done.returncode in (1, 2) else 3
        raise error


def first_difference(a: Run, b: Run) -> tuple[str, str] | None:
    """(stage, file) of the first output that differs between two runs, or None."""
    fa, fb = _index(a.dumps), _index(b.dumps)
    for ea, eb in zip(fa, fb, strict=False):
        if (ea["file"], ea["sha256"]) != (eb["file"], eb["sha256"]):
            return ea.get("stage") or "?", ea["file"] if ea["file"] == eb["file"] else f"{ea['file']} / {eb['file']}"
    if len(fa) != len(fb):
        extra = (fa if len(fa) > len(fb) else fb)[min(len(fa), len(fb))]
        return extra.get("stage") or "?", f"{extra['file']} (only in one run)"
    return _bundle_difference(a.bundle, b.bundle)


def _index(dumps: str) -> list[dict]:
    with open(os.path.join(dumps, "index.json"), encoding="utf-8") as f:
        return json.load(f)["files"]


def _bundle_difference(a: str, b: str) -> tuple[str, str] | None:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        if fa.read() == fb.read():
            return None
    from ..bundle import read_bundle

    ba, bb = read_bundle(a), read_bundle(b)
    for name in sorted(set(ba.members) | set(bb.members)):
        if name not in ba.members or name not in bb.members or bytes(ba.members[name]) != bytes(bb.members[name]):
            return "bundle", f"member {name}"
    return "bundle", "manifest.json"


def check_determinism(n: int, argv: list[str], output: str | None, dump_dir: str | None) -> str:
    """Run the N compiles and compare; the success line, or CheckFailed naming the stage."""
    if n < 2:
        raise InputError("--check-determinism wants at least 2 compiles")
    base = dump_dir or tempfile.mkdtemp(prefix="hloc-determinism-")
    runs = [Run(seed, os.path.join(base, f"run{i}.bundle"), os.path.join(base, f"run{i}"))
            for i, seed in enumerate(range(1, n + 1))]
    try:
        os.makedirs(base, exist_ok=True)
        with ThreadPoolExecutor(max_workers=min(n, os.cpu_count() or 1)) as pool:
            list(pool.map(lambda r: _compile(argv, r), runs))
        for run in runs[1:]:
            diff = first_difference(runs[0], run)
            if diff is not None:
                raise CheckFailed(f"compile is not deterministic: stage '{diff[0]}' differs first, "
                                  f"in {diff[1]} (PYTHONHASHSEED={runs[0].seed} vs {run.seed})")
        if output:
            shutil.copyfile(runs[0].bundle, output)
        files = len(_index(runs[0].dumps))
    finally:
        if dump_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    return (f"deterministic: {n} compiles (PYTHONHASHSEED=1..{n}) gave identical stage dumps "
            f"({files} files) and bundles")
