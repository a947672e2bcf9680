"""Predicates over modules for `hloc bisect` and `hloc reduce`.

- `run_script(cmd, text)`: runs `CMD FILE` through the shell on the module text written to a
  temporary FILE and returns the exit status (None on a timeout). `bisect --script` reads
  exit 0 as "good" (as `git bisect run` does); `reduce --script` reads exit 0 as "still
  interesting" (as C-Reduce does).
- `CompilePredicate`: bisect's default. It compiles a module the pipeline produced, runs the
  bundle and compares with the reference interpreter's outputs for the ORIGINAL module.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile

import numpy as np

from ..errors import HlocError
from ..ir import Module
from ..util.record import dataclass


@dataclass(frozen=True)
class Verdict:
    """A predicate's answer: `good` and, when not, why (one line)."""

    good: bool
    detail: str = ""


def run_script(cmd: str, text: str, *, timeout: float | None = 60.0, name: str = "module.hlo") -> int | None:
    """`CMD FILE` on the text; its exit status, or None when it ran past `timeout` seconds."""
    with tempfile.TemporaryDirectory(prefix="hloc-script-") as tmp:
        path = os.path.join(tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            done = subprocess.run(f"{cmd} {shlex.quote(path)}", shell=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            return None
    return done.returncode


@dataclass
class ScriptPredicate:
    """bisect --script: the module text after the prefix is good when `CMD FILE` exits 0."""

    cmd: str
    timeout: float | None = 60.0

    def __call__(self, module: Module, completion: str) -> Verdict:
        from ..ir.text.printer import print_module

        rc = run_script(self.cmd, print_module(module), timeout=self.timeout)
        if rc == 0:
            return Verdict(True)
        if rc is None:
            return Verdict(False, f"the script ran past {self.timeout:g} s")
        return Verdict(False, f"the script exited with status {rc}")


@dataclass
class CompilePredicate:
    """bisect's default: compile, run on `args`, compare with `expected` (the original's outputs).

    `completion` is the spec of passes compiled after the prefix (see bisect.completion_spec).
    """

    target: str
    opt_level: int
    args: list[np.ndarray]
    expected: list[np.ndarray]
    rtol: float | None = None
    atol: float | None = None
    cpu: str | None = None
    cpu_features: str | None = None

    def __call__(self, module: Module, completion: str) -> Verdict:
        try:
            outputs = self._compile_and_run(module, completion)
        except HlocError as e:
            return Verdict(False, f"compile or run failed: {e}")
        except Exception as e:  # noqa: BLE001 - a crash is a failing predicate, not ours
            return Verdict(False, f"compile or run crashed: {type(e).__name__}: {e}")
        from ..runtime.io import compare_arrays

        if len(outputs) != len(self.expected):
            return Verdict(False, f"{len(outputs)} outputs, the reference has {len(self.expected)}")
        report = compare_arrays(outputs, self.expected, rtol=self.rtol, atol=self.atol)
        if report.ok:
            return Verdict(True)
        bad = [c for c in report.checks if not c.ok]
        return Verdict(False, "outputs differ from the reference interpreter: "
                       + "; ".join(_check_text(c) for c in bad[:3]))

    def _compile_and_run(self, module: Module, completion: str) -> list[np.ndarray]:
        from ..bundle import write_bundle
        from ..compiler import CompileOptions, compile_model
        from ..frontend import module_to_proto
        from ..runtime import load

        options = CompileOptions(target=self.target, opt_level=self.opt_level, passes=completion,
                                 cpu=self.cpu, cpu_features=self.cpu_features)
        data = module_to_proto(module).SerializeToString(deterministic=True)
        result = compile_model(f"<{module.name}>", options, data=data)
        with tempfile.TemporaryDirectory(prefix="hloc-bisect-") as tmp:
            path = os.path.join(tmp, "prefix.bundle")
            write_bundle(path, manifest=result.manifest, members=result.members)
            return [np.asarray(o) for o in load(path).run(self.args)]


def _check_text(check) -> str:
    text = (f"out{check.index} {check.type_text}: {check.mismatches} of {check.size} differ, "
            f"max abs err {check.max_abs:.3g}, max rel err {check.max_rel:.3g}")
    return text + (f" ({check.note})" if check.note else "")


def reference_outputs(module: Module, args: list[np.ndarray]) -> list[np.ndarray]:
    """The reference interpreter's flattened outputs for `module` on `args`."""
    from ..runtime.interpreter import evaluate

    return [np.asarray(a) for a in evaluate(module, args).flatten()]
