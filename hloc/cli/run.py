"""`hlo-run`: execute a bundle on a device, compare, benchmark and profile."""

from __future__ import annotations

import json
import statistics
import time

import click
import numpy as np

from .. import __version__
from ..errors import CheckFailed, InputError
from .common import debug_enabled, guarded, setup_logging

DEVICES = ("cpu", "cuda", "cuda-emulated", "interpreter")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("bundle_path", metavar="BUNDLE", type=click.Path(dir_okay=True))
@click.option("--inputs", "inputs", multiple=True, help=".npy (next parameter) or .npz (arg0../names); repeatable")
@click.option("--random-inputs", is_flag=True, help="fill parameters not given with random data")
@click.option("--zero-inputs", is_flag=True, help="fill parameters not given with zeros")
@click.option("--seed", default=0, show_default=True, help="seed for --random-inputs")
@click.option("--output", default=None, help="write results to FILE.npz (out0, out1, ...)")
@click.option("--expected", default=None, help="compare with FILE.npz; exit 1 on mismatch")
@click.option("--rtol", default=None, type=float, help="relative tolerance (default per dtype)")
@click.option("--atol", default=None, type=float, help="absolute tolerance (default per dtype)")
@click.option("--reference", is_flag=True, help="also run on the NumPy reference interpreter and compare")
@click.option("--benchmark", default=0, type=int, help="N timed runs after warm-up")
@click.option("--report", default=None, help="write a JSON report here")
@click.option("--profile", is_flag=True, help="per-thunk time table, slowest first")
@click.option("--device", default=None, type=click.Choice(DEVICES), help="default: the bundle's target")
@click.option("--debug", is_flag=True, help="tracebacks on internal errors")
@click.version_option(__version__, "--version", prog_name="hlo-run")
@guarded("hlo-run")
def cli(bundle_path, inputs, random_inputs, zero_inputs, seed, output, expected, rtol, atol,
        reference, benchmark, report, profile, device, debug):
    """Run BUNDLE (written by `hloc compile`) on a device."""
    from ..runtime import load
    from ..runtime.io import compare_outputs, load_inputs, summarize, write_outputs

    setup_logging(debug_enabled(debug))
    if benchmark < 0:
        raise InputError("--benchmark wants a non-negative count")
    exe = load(bundle_path, device)
    args = load_inputs(_signature(exe.bundle), list(inputs), random=random_inputs, zero=zero_inputs,
                       seed=seed, snapshot_args=_snapshot_arguments(exe.bundle))
    outputs = exe.run(args)
    result: dict = {"device": exe.device, "bundle": bundle_path,
                    "outputs": [{"index": i, "dtype": str(o.dtype), "shape": list(o.shape)} for i, o in enumerate(outputs)]}
    failed = []
    if expected:
        rep = compare_outputs(outputs, expected, rtol=rtol, atol=atol, dtypes=_result_dtypes(exe.bundle))
        click.echo(rep.format())
        result["expected"] = {"file": expected, "ok": rep.ok}
        if not rep.ok:
            failed.append(f"outputs differ from {expected}")
    if reference:
        failed += _compare_reference(exe, args, outputs, rtol, atol, result)
    if profile:
        click.echo(_profile_table(exe, args))
    if benchmark:
        result["benchmark"] = _benchmark(exe, args, benchmark)
        b = result["benchmark"]
        click.echo(f"benchmark: n={b['n']} median={b['median_s'] * 1e3:.3f} ms "
                   f"min={b['min_s'] * 1e3:.3f} ms mean={b['mean_s'] * 1e3:.3f} ms max={b['max_s'] * 1e3:.3f} ms")
    if output:
        write_outputs(output, outputs)
    if not (expected or output or benchmark or profile):
        click.echo(summarize(outputs))
    if report:
        from ..util.fs import atomic_write

        atomic_write(report, json.dumps(result, indent=1, sort_keys=True) + "\n")
    if failed:
        raise CheckFailed("; ".join(failed), bundle_path)


def _snapshot_arguments(bundle) -> list[np.ndarray] | None:
    """The arguments of the HloSnapshot the bundle was compiled from, if it was."""
    if "snapshot_arguments.pb" not in bundle.members:
        return None
    from ..frontend import literal_from_bytes

    literal = literal_from_bytes(bundle.members["snapshot_arguments.pb"], f"{bundle.path}:snapshot_arguments.pb")
    return [e.array if e.shape.is_array else None for e in literal.elements]


def _signature(bundle):
    from ..runtime.io import Signature

    return Signature.from_manifest(bundle.manifest)


def _result_dtypes(bundle) -> list[str]:
    return [r["dtype"] for r in bundle.manifest["entry"]["results"]]


def _compare_reference(exe, args, outputs, rtol, atol, result) -> list[str]:
    from ..runtime.executable import InterpreterExecutable
    from ..runtime.io import compare_arrays

    ref = InterpreterExecutable(exe.bundle).run(args)
    rep = compare_arrays(outputs, ref, rtol=rtol, atol=atol)
    click.echo(rep.format())
    result["reference"] = {"ok": rep.ok}
    return [] if rep.ok else ["outputs differ from the reference interpreter"]


def _benchmark(exe, args, n: int) -> dict:
    exe.run(args)  # warm-up: caches, lazy initialization
    times = []
    for _ in range(n):
        start = time.perf_counter()
        exe.run(args)
        times.append(time.perf_counter() - start)
    return {"n": n, "median_s": statistics.median(times), "min_s": min(times),
            "mean_s": statistics.fmean(times), "max_s": max(times)}


# --profile: one warm-up run (first touches of memory, lazy binding), then the mean of up to
# PROFILE_RUNS runs, stopping early once PROFILE_SECONDS have passed.
PROFILE_RUNS = 10
PROFILE_SECONDS = 1.0


def _profile_table(exe, args) -> str:
    exe.run_profiled(args)
    merged: dict[str, object] = {}
    runs, start = 0, time.perf_counter()
    while runs < PROFILE_RUNS and (runs == 0 or time.perf_counter() - start < PROFILE_SECONDS):
        _, rows = exe.run_profiled(args)
        runs += 1
        for r in rows:
            m = merged.setdefault(r.name, r.__class__(r.name, r.kind, r.ops))
            m.count += r.count
            m.seconds += r.seconds
    total = sum(r.seconds for r in merged.values()) or 1e-12
    lines = [f"profile: per run, mean of {runs} run(s) after a warm-up run",
             f"{'thunk':<32} {'kind':<18} {'count':>6} {'total ms':>10} {'%':>6}  ops"]
    for r in sorted(merged.values(), key=lambda r: -r.seconds):
        lines.append(f"{r.name[:32]:<32} {r.kind[:18]:<18} {r.count / runs:>6g} "
                     f"{r.seconds / runs * 1e3:>10.3f} {100 * r.seconds / total:>6.1f}  {r.ops}")
    return "\n".join(lines)


def main() -> None:
    np.seterr(all="ignore")
    cli(prog_name="hlo-run")


if __name__ == "__main__":
    main()
