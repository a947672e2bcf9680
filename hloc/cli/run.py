"""`hlo-run`: execute a bundle on a device, compare, benchmark and profile."""

from __future__ import annotations

import json
import sys
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
@click.option("--baseline", default=None, help="an earlier --report: exit 1 on a significant slowdown")
@click.option("--max-regression", default=5.0, show_default=True, help="PCT slower than --baseline allowed")
@click.option("--profile", is_flag=True, help="per-thunk time table, slowest first")
@click.option("--device", default=None, type=click.Choice(DEVICES), help="default: the bundle's target")
@click.option("--timeout", default=None, type=float,
              help="stop the run after S seconds (exit 1); Ctrl-C stops it too (exit 130)")
@click.option("--max-memory", default=None, type=click.IntRange(min=1),
              help="refuse a run needing more than BYTES (arguments + outputs + temp)")
@click.option("--trusted-key", "trusted_keys", multiple=True,
              help="run only bundles signed with this key FILE (repeatable; also "
                   "HLOC_TRUSTED_KEYS, paths joined with ':')")
@click.option("--debug", is_flag=True, help="tracebacks on internal errors")
@click.version_option(__version__, "--version", prog_name="hlo-run")
@guarded("hlo-run")
def cli(bundle_path, inputs, random_inputs, zero_inputs, seed, output, expected, rtol, atol,
        reference, benchmark, report, baseline, max_regression, profile, device, timeout,
        max_memory, trusted_keys, debug):
    """Run BUNDLE (written by `hloc compile`) on a device.

    \b
    Trust: a bundle holds native code that runs in this process, as a shared library does;
    run only bundles you would trust as a library, or require a signature with
    --trusted-key. The object cache (HLOC_CACHE_DIR) is native code too: it is MACed with a
    per-user key and must be a directory only you can write. Every member is validated
    before use (slices, symbols, imports, entry signature): a bad one is exit 2."""
    from ..bundle.signing import trusted_key_files
    from ..runtime import load
    from ..runtime.io import load_inputs, summarize, write_outputs
    from ..runtime.limits import check_timeout, preflight_memory, run_limits

    setup_logging(debug_enabled(debug))
    if benchmark < 0:
        raise InputError("--benchmark wants a non-negative count")
    if baseline and not benchmark:
        raise InputError("--baseline needs --benchmark N")
    check_timeout(timeout)
    _check_tolerances(rtol, atol)
    exe = load(bundle_path, device, trusted_keys=trusted_key_files(trusted_keys))
    preflight_memory(exe.bundle.manifest, max_memory, bundle_path)
    args = load_inputs(_signature(exe.bundle), list(inputs), random=random_inputs, zero=zero_inputs,
                       seed=seed, snapshot_args=_snapshot_arguments(exe.bundle))
    with run_limits(timeout, f"the run of {bundle_path}", bundle_path):
        outputs = exe.run(args)
        result, failed = _checks(exe, args, outputs, bundle_path, expected, rtol, atol,
                                 reference, profile, benchmark, baseline, max_regression)
    if output:
        write_outputs(output, outputs)
    if not (expected or output or benchmark or profile):
        click.echo(summarize(outputs))
    if report:
        from ..util.fs import atomic_write

        atomic_write(report, json.dumps(result, indent=1, sort_keys=True) + "\n")
    if failed:
        raise CheckFailed("; ".join(failed), bundle_path)


def _check_tolerances(rtol: float | None, atol: float | None) -> None:
    """--rtol/--atol: finite and not negative (a negative tolerance fails every comparison)."""
    for flag, value in (("--rtol", rtol), ("--atol", atol)):
        if value is not None and not 0 <= value < float("inf"):
            raise InputError(f"{flag} wants a finite non-negative number, got {value:g}")


def _checks(exe, args, outputs, bundle_path, expected, rtol, atol, reference, profile,
            benchmark, baseline, max_regression) -> tuple[dict, list[str]]:
    """--expected, --reference, --profile, --benchmark: (report dict, failures)."""
    from ..runtime.io import compare_outputs

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
        failed += _run_benchmark(exe, args, benchmark, baseline, max_regression, result)
    result["memory"] = _memory(exe.bundle.manifest)
    if profile or benchmark:
        click.echo("memory: " + " ".join(f"{k}={v}" for k, v in result["memory"].items()))
    return result, failed


_MEMORY_KEYS = ("temp_bytes", "argument_bytes", "output_bytes", "constant_bytes")


def _memory(manifest: dict) -> dict[str, int]:
    """The bundle's arena sizes (its buffer assignment) and this process's peak resident set
    so far: what a run of the bundle costs in memory."""
    import resource
    import sys

    sizes = manifest.get("memory") or {}
    out = {k: int(sizes.get(k, 0)) for k in _MEMORY_KEYS}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kilobytes, macOS bytes.
    out["peak_rss_bytes"] = int(peak if sys.platform == "darwin" else peak * 1024)
    return out


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


def _run_benchmark(exe, args, n: int, baseline, max_regression: float, result: dict) -> list[str]:
    """--benchmark N (and --baseline): time, print, record; the failures to report."""
    result["benchmark"] = b = _benchmark(exe, args, n)
    click.echo(f"benchmark: n={b['n']} median={b['median_s'] * 1e3:.3f} ms "
               f"min={b['min_s'] * 1e3:.3f} ms mean={b['mean_s'] * 1e3:.3f} ms max={b['max_s'] * 1e3:.3f} ms "
               f"p10={b['p10_s'] * 1e3:.3f} ms p90={b['p90_s'] * 1e3:.3f} ms cv={b['cv']:.3f}")
    return _compare_baseline(b, baseline, max_regression, result) if baseline else []


def _benchmark(exe, args, n: int) -> dict:
    from ..debug.stats import summarize

    exe.run(args)  # warm-up: caches, lazy initialization
    times = []
    for _ in range(n):
        start = time.perf_counter()
        exe.run(args)
        times.append(time.perf_counter() - start)
    return summarize(times)


def _compare_baseline(bench: dict, path: str, max_regression: float, result: dict) -> list[str]:
    """--baseline: the statistical verdict against an earlier report (see hloc/debug/stats.py)."""
    from ..debug.stats import baseline_benchmark, compare, format_verdict

    try:
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
    except OSError as e:
        raise InputError(f"cannot read baseline: {e.strerror}", path) from None
    except ValueError as e:
        raise InputError(f"baseline is not valid JSON: {e}", path) from None
    verdict = compare(bench, baseline_benchmark(old, path), max_regression)
    result["baseline"] = {"file": path, **verdict}
    click.echo(format_verdict(verdict))
    return [f"slower than {path} by {verdict['change_pct']:.1f}%"] if verdict["verdict"] == "regression" else []


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
    from ..util.safe_write import install_sigterm_cleanup

    np.seterr(all="ignore")
    install_sigterm_cleanup()
    cli(prog_name="hlo-run")


if __name__ == "__main__":
    sys.exit(main())
