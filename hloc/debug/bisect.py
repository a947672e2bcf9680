"""`hloc bisect`: the first pass application after which a predicate fails.

The pipeline (`-O`, `--passes` or `--pipeline`, as the compile would build it) runs once on the
module, recording the module after each pass application (see trace.py: fixpoint groups are
flattened into the applications they made). Prefix 0 (no pass) must be good and the whole
list bad; a binary search over prefixes then finds k with prefix k-1 good and prefix k bad:
application k-1 (0-based `index`) is the first bad pass.

With the default predicate a prefix is compiled by the rest of the backend: the passes of the
target's -O0 pipeline (what correct code generation needs: inlining, expanders, layouts) that
the full pipeline would have run but the prefix has not yet run are run after it, as LLVM's
opt-bisect keeps required passes. The whole pipeline is compiled exactly as `hloc compile`.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Callable
from dataclasses import field

import numpy as np

from .. import __version__
from ..ir import Module
from ..util.record import dataclass
from .predicates import Verdict
from .trace import Application, Trace

FOUND, NO_FAILURE, FAILS_WITHOUT_PASSES = "found", "no-failure", "fails-without-passes"


@dataclass
class BisectResult:
    """What the search found; `verdict` is one of FOUND, NO_FAILURE, FAILS_WITHOUT_PASSES."""

    verdict: str
    trace: Trace
    tried: list[dict] = field(default_factory=list)
    first_bad: Application | None = None
    detail: str = ""
    diff: str = ""
    repro_dir: str | None = None

    def as_json(self) -> dict:
        bad = self.first_bad
        return {"verdict": self.verdict,
                "first_bad_pass": bad.spec if bad else None,
                "index": bad.index if bad else None,
                "group": bad.group if bad else None,
                "detail": self.detail,
                "passes_tried": self.tried,
                "pipeline": [a.spec for a in self.trace.applications],
                "pipeline_error": self.trace.error,
                "diff": self.diff,
                "repro_dir": self.repro_dir}


def completion_spec(trace: Trace, k: int, target: str) -> str:
    """The required (-O0) passes the full pipeline runs that prefix k has not run yet."""
    from ..passes.pipelines import default_pipeline

    full, done = trace.prefix_names(trace.length), trace.prefix_names(k)
    required = [item.spec() for item in default_pipeline(target, 0)]
    return ",".join(p for p in required if p in full and p not in done)


Predicate = Callable[[Module, str], Verdict]


def bisect(trace: Trace, predicate: Predicate, completion: Callable[[int], str]) -> BisectResult:
    """Binary search for the first bad prefix (see the module docstring)."""
    tried: list[dict] = []
    cache: dict[tuple[int, str], Verdict] = {}

    def test(k: int) -> Verdict:
        if k >= len(trace.states):
            verdict = Verdict(False, trace.error or "the pass failed")
        else:
            key = (id(trace.states[k]), completion(k))  # unchanged passes share their state
            if key not in cache:
                cache[key] = predicate(trace.states[k], key[1])
            verdict = cache[key]
        last = trace.applications[k - 1].spec if k else None
        tried.append({"prefix": k, "last_pass": last, "good": verdict.good, "detail": verdict.detail})
        return verdict

    first = test(0)
    if not first.good:
        return BisectResult(FAILS_WITHOUT_PASSES, trace, tried, detail=first.detail)
    n = trace.length
    last = test(n) if n else first
    if last.good:
        return BisectResult(NO_FAILURE, trace, tried)
    good, bad, detail = 0, n, last.detail
    while bad - good > 1:
        mid = (good + bad) // 2
        verdict = test(mid)
        if verdict.good:
            good = mid
        else:
            bad, detail = mid, verdict.detail
    app = trace.applications[bad - 1]
    return BisectResult(FOUND, trace, tried, app, detail, _pass_diff(trace, bad))


def _pass_diff(trace: Trace, k: int) -> str:
    """A unified diff of the module text before and after application k-1."""
    from ..ir.text.printer import print_module

    app = trace.applications[k - 1]
    before = print_module(trace.states[k - 1], print_metadata=False)
    after = (print_module(trace.states[k], print_metadata=False) if k < len(trace.states)
             else f"<{trace.error}>\n")
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 f"before {app.label()}", f"after {app.label()}")
    return "".join(lines)


def write_repro(directory: str, result: BisectResult, original: Module, flags: dict,
                args: list[np.ndarray] | None = None,
                expected: list[np.ndarray] | None = None) -> None:
    """The repro directory: original.hlo, before.hlo/after.hlo, inputs, expected, flags.json."""
    from ..ir.text.printer import print_module
    from ..util.fs import atomic_write

    os.makedirs(directory, exist_ok=True)
    atomic_write(os.path.join(directory, "original.hlo"), print_module(original))
    bad = result.first_bad
    if bad is not None:
        k = bad.index + 1
        atomic_write(os.path.join(directory, "before.hlo"), print_module(result.trace.states[k - 1]))
        if k < len(result.trace.states):
            atomic_write(os.path.join(directory, "after.hlo"), print_module(result.trace.states[k]))
        atomic_write(os.path.join(directory, "pass.diff"), result.diff)
    if args is not None:
        _save_npz(os.path.join(directory, "inputs.npz"), "arg", args)
    if expected is not None:
        from ..runtime.io import write_outputs

        write_outputs(os.path.join(directory, "expected.npz"), expected)
    info = {"hloc_version": __version__, **flags, **result.as_json()}
    info.pop("diff", None)
    atomic_write(os.path.join(directory, "flags.json"), json.dumps(info, indent=1, sort_keys=True) + "\n")


def _save_npz(path: str, prefix: str, arrays: list[np.ndarray]) -> None:
    """arg0, arg1, ... in an .npz for hlo-run --inputs."""
    # ml_dtypes arrays (bf16, f8, ...) are stored as same-width unsigned bit patterns, the
    # form hlo-run's --inputs accepts for them; numpy could not reload them otherwise.
    from ..runtime.io import is_ml_dtype

    out: dict[str, np.ndarray] = {}
    for i, arr in enumerate(arrays):
        arr = np.ascontiguousarray(arr)
        out[f"{prefix}{i}"] = arr.view(f"u{arr.dtype.itemsize}") if is_ml_dtype(arr.dtype) else arr
    # allow_pickle is numpy's default, spelled out: no **out key can then be taken for it.
    np.savez(path, allow_pickle=True, **out)
