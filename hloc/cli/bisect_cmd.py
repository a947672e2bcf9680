"""`hloc bisect`: which pass of the pipeline breaks the module (see hloc/debug/bisect.py)."""

from __future__ import annotations

import json
import os
import shlex

import click

from ..errors import CheckFailed, InputError
from .common import debug_enabled, guarded, setup_logging


def _opt_flags(fn):
    for level in reversed(range(4)):
        fn = click.option(f"-O{level}", f"O{level}", is_flag=True,
                          help=f"the -O{level} pipeline" + (" (default)" if level == 2 else ""))(fn)
    return fn


@click.command(name="bisect")
@click.argument("model", type=click.Path(dir_okay=True))
@_opt_flags
@click.option("--passes", default=None, help="bisect this pass spec instead of the -O pipeline")
@click.option("--pipeline", "pipeline_file", default=None, help="bisect a JSON pipeline file")
@click.option("--disable-pass", "disable_pass", multiple=True, help="skip a pass (repeatable)")
@click.option("--target", default="cpu", show_default=True, help="cpu, cuda or interpreter")
@click.option("--inputs", "inputs", multiple=True, help=".npy/.npz inputs (default: random, --seed)")
@click.option("--seed", default=0, show_default=True, help="seed for random inputs")
@click.option("--rtol", default=None, type=float, help="relative tolerance (default per dtype)")
@click.option("--atol", default=None, type=float, help="absolute tolerance (default per dtype)")
@click.option("--script", default=None,
              help="predicate: run `CMD FILE` on the HLO text after each prefix; exit 0 = good "
                   "(as `git bisect run`; note `hloc reduce --script` reads exit 0 as 'still failing')")
@click.option("--script-timeout", default=60.0, show_default=True, help="seconds; a timeout is bad")
@click.option("--repro-dir", default=None, help="repro directory (default ./hloc-bisect.MODEL)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--debug", is_flag=True, help="tracebacks on internal errors")
@guarded("hloc")
def bisect_cmd(model, O0, O1, O2, O3, passes, pipeline_file, disable_pass, target, inputs, seed,
               rtol, atol, script, script_timeout, repro_dir, as_json, debug):
    """Find the first pass application after which MODEL stops being correct.

    Default predicate: compile the prefix (plus the required -O0 passes it has not run), run it
    on --inputs (or random inputs) and compare with the reference interpreter on the original
    MODEL. Fixpoint groups count once per pass per iteration they ran. Exit 0 when a pass is
    found, 1 when none is to blame (the predicate holds after every pass, or already fails
    without any pass), 2 on bad usage or input.
    """
    from ..compiler import CompileOptions, build_pipeline
    from ..debug.bisect import completion_spec
    from ..debug.trace import record
    from ..frontend import load
    from ..ir.verifier import verify
    from ..passes.pipelines import check_disabled
    from .compile_cmd import opt_level

    setup_logging(debug_enabled(debug))
    level = opt_level({"O0": O0, "O1": O1, "O2": O2, "O3": O3})
    options = CompileOptions(target=target, opt_level=level, passes=passes,
                             pipeline_file=pipeline_file, disabled_passes=tuple(disable_pass))
    if target not in ("cpu", "cuda", "interpreter"):
        raise InputError(f"unknown target '{target}' (choose from cpu, cuda, interpreter)")
    original = load(model).module
    verify(original)
    trace = record(original, build_pipeline(options), check_disabled(disable_pass))
    flags = {"model": os.path.abspath(model), "target": target, "opt_level": level,
             "pipeline_spec": trace.prefix_spec(trace.length), "script": script}
    args = expected = None
    if script is None:
        predicate, args, expected = _compile_predicate(original, options, inputs, seed, rtol, atol)
    else:
        from ..debug.predicates import ScriptPredicate

        predicate = ScriptPredicate(script, script_timeout)
    _finish(model, original, trace, predicate, lambda k: "" if script else completion_spec(trace, k, target),
            flags, args, expected, repro_dir, as_json)


def _compile_predicate(original, options, inputs, seed, rtol, atol):
    from ..bundle.manifest import entry_section
    from ..debug.predicates import CompilePredicate, reference_outputs
    from ..runtime.io import Signature, load_inputs

    sig = Signature.from_manifest({"entry": entry_section(original)})
    args = load_inputs(sig, list(inputs), random=True, seed=seed)
    expected = reference_outputs(original, args)
    predicate = CompilePredicate(options.target, options.opt_level, args, expected, rtol, atol)
    return predicate, args, expected


def _finish(model, original, trace, predicate, completion, flags, args, expected, repro_dir, as_json):
    from ..debug.bisect import FOUND, bisect, write_repro

    result = bisect(trace, predicate, completion)
    if result.first_bad is not None:
        k = result.first_bad.index + 1
        flags["reproduce"] = _reproduce(flags, trace.prefix_spec(k), completion(k))
    result.repro_dir = repro_dir or f"hloc-bisect.{_stem(model)}"
    write_repro(result.repro_dir, result, original, flags, args, expected)
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=1, sort_keys=True))
    else:
        click.echo(_human(result))
    if result.verdict != FOUND:
        raise CheckFailed(_no_culprit(result), model)


def _reproduce(flags: dict, prefix: str, completion: str) -> list[str]:
    spec = ",".join(s for s in (prefix, completion) if s)
    if flags["script"]:
        return [f"hloc opt original.hlo --passes {shlex.quote(spec)} -o after.hlo",
                f"{flags['script']} after.hlo"]
    return [f"hloc compile original.hlo --target {flags['target']} --passes {shlex.quote(spec)} -o repro.bundle",
            "hlo-run repro.bundle --inputs inputs.npz --expected expected.npz"]


def _stem(model: str) -> str:
    base = os.path.basename(os.path.normpath(model))
    return base.split(".", 1)[0] or "model"


def _no_culprit(result) -> str:
    if result.verdict == "no-failure":
        return "no pass to blame: the predicate holds after every pass of the pipeline"
    return f"no pass to blame: the predicate already fails without any pass ({result.detail})"


def _human(result) -> str:
    lines = [f"pipeline: {result.trace.length} pass applications"
             + (f" (it stops at a failing pass: {result.trace.error})" if result.trace.error else "")]
    for t in result.tried:
        lines.append(f"  prefix {t['prefix']:>4} ({t['last_pass'] or 'no pass'}): "
                     + ("good" if t["good"] else f"bad: {t['detail']}"))
    bad = result.first_bad
    if bad is not None:
        lines.append(f"first bad pass: {bad.label()} (index {bad.index})")
        lines.append(f"  why: {result.detail}")
        lines.append(result.diff.rstrip("\n") or "(the pass did not change the module text)")
    lines.append(f"repro: {result.repro_dir}")
    return "\n".join(lines)
