"""`hlo-run`: execute a bundle on a device, compare, benchmark and profile."""

from __future__ import annotations

import json
import logging
import sys
import time
from types import SimpleNamespace

import click
import numpy as np

from .. import __version__
from ..errors import CheckFailed, InputError, UnsupportedError
from .common import about_file, debug_enabled, exit_without_teardown, guarded, setup_logging

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
@click.option("--localize", is_flag=True, help="check every thunk against the reference on its own inputs; "
              "exit 1 naming the first divergent one")
@click.option("--perturb", default=None, metavar="THUNK[=REL]",
              help="add a relative error (default 1e-2) to one thunk's outputs after it runs "
                   "(multi-device: on every device, or THUNK[=REL]@RANK on one)")
@click.option("--trace", default=None, metavar="FILE.json", help="write a Chrome/Perfetto trace of one run")
@click.option("--resident", default=None, metavar="SPEC",
              help="cuda, cuda-emulated: keep these parameters on the device between runs "
                   "(all, all-but-last:N, 0-160, 0,3,5)")
@click.option("--device", default=None, type=click.Choice(DEVICES), help="default: the bundle's target")
@click.option("--timeout", default=None, type=float,
              help="stop the run after S seconds (exit 1); Ctrl-C stops it too (exit 130)")
@click.option("--max-memory", default=None, type=click.IntRange(min=1),
              help="refuse a run needing more than BYTES (arguments + outputs + temp)")
@click.option("--trusted-key", "trusted_keys", multiple=True,
              help="run only bundles signed with this key FILE (repeatable; also "
                   "HLOC_TRUSTED_KEYS, paths joined with ':')")
@click.option("--processes", default=None, type=int,
              help="run a multi-device bundle as N MPI ranks (mpiexec), one device per rank")
@click.option("--deterministic-collectives", is_flag=True,
              help="reduce in rank order on one rank: bit-identical to XLA CPU")
@click.option("--collective-timeout", default=300.0, type=float, show_default=True,
              help="seconds a collective may wait before the job fails")
@click.option("--debug", is_flag=True, help="tracebacks on internal errors")
@click.version_option(__version__, "--version", prog_name="hlo-run")
@guarded("hlo-run")
def cli(bundle_path, **opts):
    """Run BUNDLE (written by `hloc compile`) on a device.

    A multi-device bundle runs as N MPI ranks with `--processes N` (or under `mpiexec -n N`),
    one device per rank; --inputs are then the GLOBAL arrays and outputs are assembled on rank
    0, which prints. Without either, all devices run in this process, one thread each.

    \b
    Trust: a bundle holds native code that runs in this process, as a shared library does;
    run only bundles you would trust as a library, or require a signature with
    --trusted-key. The object cache (HLOC_CACHE_DIR) is native code too: it is MACed with a
    per-user key and must be a directory only you can write. Every member is validated
    before use (slices, symbols, imports, entry signature): a bad one is exit 2."""
    from ..bundle.signing import trusted_key_files
    from ..runtime.ranks import launched_size

    o = SimpleNamespace(**opts)
    if o.processes is not None:
        from .launch import launch

        sys.exit(launch(o.processes, sys.argv[1:]))
    setup_logging(debug_enabled(o.debug))
    _check_options(o)
    keys = trusted_key_files(o.trusted_keys)
    if launched_size() is None:
        return _execute(_load(bundle_path, o, keys), bundle_path, o)
    from ..runtime.ranks import open_ranks, rank_errors

    with rank_errors():
        # Options every rank must share (their digest is compared before any collective).
        shared = (f"{o.device} {o.deterministic_collectives} {o.benchmark} {o.profile} "
                  f"{o.localize} {o.perturb} {bool(o.trace)}")
        exe = open_ranks(bundle_path, o.device, deterministic=o.deterministic_collectives,
                         timeout=o.collective_timeout, options=shared, trusted_keys=keys)
        _execute(exe or _load(bundle_path, o, keys), bundle_path, o)


def _check_options(o) -> None:
    """Flag values that make no sense, refused before anything is loaded."""
    from ..runtime.limits import check_timeout

    if o.benchmark < 0:
        raise InputError("--benchmark wants a non-negative count")
    if o.baseline and not o.benchmark:
        raise InputError("--baseline needs --benchmark N")
    if o.processes is not None and o.processes < 1:
        raise InputError("--processes wants a positive count")
    check_timeout(o.timeout)
    _check_tolerances(o.rtol, o.atol)


def _load(bundle_path: str, o, keys):
    """The bundle loaded (verified, validated) on its device, its memory checked."""
    from ..runtime import load
    from ..runtime.limits import preflight_memory

    exe = load(bundle_path, o.device, trusted_keys=keys)
    preflight_memory(exe.bundle.manifest, o.max_memory, bundle_path)
    if o.resident is not None:
        _set_resident(exe, o.resident)
    return exe


def _set_resident(exe, spec: str) -> None:
    """--resident SPEC: only GPU executables keep parameters on a device."""
    from ..runtime.cuda.residency import parse_spec

    if not hasattr(exe, "set_resident"):
        raise InputError(f"--resident needs --device cuda or cuda-emulated (not {exe.device})")
    wanted = parse_spec(spec, len(exe.bundle.manifest["entry"]["parameters"]))
    kept = exe.set_resident(wanted)
    if kept != wanted:
        left = sorted(wanted - kept)
        logging.getLogger(__name__).warning(
            "parameters %s are donated to outputs and are uploaded on every run",
            ",".join(map(str, left)))


def _execute(exe, bundle_path: str, o) -> None:
    """Run, then (on rank 0 of a multi-rank run) compare, report and write."""
    from ..runtime.io import load_inputs, summarize, write_outputs
    from ..runtime.limits import run_limits

    root = getattr(exe, "is_root", True)
    args = load_inputs(_signature(exe), list(o.inputs), random=o.random_inputs,
                       zero=o.zero_inputs, seed=o.seed,
                       snapshot_args=_snapshot_arguments(exe.bundle)) if root else None
    result: dict = {"device": exe.device, "bundle": bundle_path}
    with run_limits(o.timeout, f"the run of {bundle_path}", bundle_path), about_file(bundle_path):
        outputs, failed = _run_once(exe, args, result, o)
        profile = _profile_table(exe, args) if o.profile else None  # every rank runs these
        bench = _benchmark(exe, args, o.benchmark) if o.benchmark else None
    if not root:
        return
    if hasattr(exe, "size"):
        result["processes"] = exe.size
        summary = exe.collectives_summary()
        if summary is not None:
            result["collectives"] = summary
    failed += _checks(exe, args, outputs, result, o, profile, bench)
    if o.output:
        write_outputs(o.output, outputs)
    if not (o.expected or o.output or o.benchmark or o.profile or o.localize):
        click.echo(summarize(outputs))
    if o.report:
        from ..util.fs import atomic_write

        atomic_write(o.report, json.dumps(result, indent=1, sort_keys=True) + "\n")
    if failed:
        raise CheckFailed("; ".join(failed), bundle_path)


def _check_tolerances(rtol: float | None, atol: float | None) -> None:
    """--rtol/--atol: finite and not negative (a negative tolerance fails every comparison)."""
    for flag, value in (("--rtol", rtol), ("--atol", atol)):
        if value is not None and not 0 <= value < float("inf"):
            raise InputError(f"{flag} wants a finite non-negative number, got {value:g}")


def _run_once(exe, args, result: dict, o) -> tuple[list, list[str]]:
    """One run: plain, or thunk by thunk for --localize / --perturb / --trace."""
    if not (o.localize or o.perturb or o.trace):
        return exe.run(args), []
    from .run_debug import instrumented_run

    return instrumented_run(exe, args, result=result, localize=o.localize, perturb=o.perturb,
                            trace=o.trace, rtol=o.rtol, atol=o.atol)


def _checks(exe, args, outputs, result: dict, o, profile, bench) -> list[str]:
    """--expected, --reference, --profile, --benchmark: record in `result`; the failures."""
    from ..runtime.io import compare_outputs

    result["outputs"] = [{"index": i, "dtype": str(x.dtype), "shape": list(x.shape)}
                         for i, x in enumerate(outputs)]
    failed = []
    if o.expected:
        rep = compare_outputs(outputs, o.expected, rtol=o.rtol, atol=o.atol,
                              dtypes=_result_dtypes(exe.bundle), computed_in=_computed_in(exe))
        click.echo(rep.format())
        result["expected"] = {"file": o.expected, "ok": rep.ok}
        if not rep.ok:
            failed.append(f"outputs differ from {o.expected}")
    if o.reference:
        failed += _compare_reference(exe, args, outputs, o.rtol, o.atol, result)
    if profile:
        click.echo(profile)
    if bench:
        failed += _report_benchmark(bench, o.baseline, o.max_regression, result)
    result["memory"] = _memory(exe)
    if profile or bench:
        click.echo("memory: " + " ".join(f"{k}={v}" for k, v in result["memory"].items()))
    return failed


_MEMORY_KEYS = ("temp_bytes", "argument_bytes", "output_bytes", "constant_bytes")


def _memory(exe) -> dict[str, int]:
    """The bundle's arena sizes (its buffer assignment), what the runtime holds beside them
    (CPU: buffers the steps share, `runtime_bytes`) and this process's peak resident set so
    far: what a run of the bundle costs in memory."""
    import resource
    import sys

    sizes = exe.bundle.manifest.get("memory") or {}
    out = {k: int(sizes.get(k, 0)) for k in _MEMORY_KEYS}
    runtime_bytes = getattr(exe, "runtime_bytes", None)
    if runtime_bytes is not None:
        out["runtime_bytes"] = int(runtime_bytes())
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


def _signature(exe):
    """The entry signature; GLOBAL shapes for a multi-device bundle (what the user passes)."""
    from ..runtime.io import Signature

    sig = Signature.from_manifest(exe.bundle.manifest)
    config = getattr(getattr(exe, "module", None), "config", None)
    if config is not None and config.device_count > 1:
        from ..runtime.spmd import global_signature

        return global_signature(sig, exe.module)
    return sig


def _computed_in(exe) -> str | None:
    """The narrow float type the bundle's module computes in (default tolerances follow it),
    where the executable holds its module."""
    from ..runtime.io import narrow_float_type

    module = getattr(exe, "module", None)
    return None if module is None else narrow_float_type(module)


def _result_dtypes(bundle) -> list[str]:
    return [r["dtype"] for r in bundle.manifest["entry"]["results"]]


def _compare_reference(exe, args, outputs, rtol, atol, result) -> list[str]:
    from ..runtime.executable import InterpreterExecutable
    from ..runtime.io import compare_arrays, without_finite_values

    ref = InterpreterExecutable(exe.bundle).run(args)
    rep = compare_arrays(outputs, ref, rtol=rtol, atol=atol, computed_in=_computed_in(exe))
    strict_ok = rep.ok
    if not rep.ok and rtol is None and atol is None:
        rep = _judge_rounding(exe, args, outputs, ref, rep)
    for i in without_finite_values(ref):
        click.echo(f"hlo-run: warning: out{i} has no finite value in the reference (NaN/Inf "
                   "only): the comparison checked nothing", err=True)
    click.echo(rep.format())
    result["reference"] = {"ok": rep.ok, "strict_ok": strict_ok}
    return [] if rep.ok else ["outputs differ from the reference interpreter"]


def _judge_rounding(exe, args, outputs, ref, strict):
    """The strict comparison failed: judge the differing outputs against the reference's f64
    shadow (interpreter/shadow.py, tolerance.judge_rounding), unless the module cannot have
    one; warnings for outputs that rounding alone makes unreliable."""
    from ..runtime.executable import InterpreterExecutable
    from ..runtime.interpreter.shadow import ShadowUnavailable, shadow_copy
    from ..runtime.io import judge_rounding

    module = getattr(exe, "module", None)
    if module is None or module.config.device_count > 1:
        return strict
    try:
        exact = InterpreterExecutable(exe.bundle, shadow_copy(module)).run(args)
    except (ShadowUnavailable, UnsupportedError) as e:
        click.echo(f"hlo-run: note: no f64 check of the differences ({e})", err=True)
        return strict
    rep, warnings = judge_rounding(outputs, ref, exact, strict)
    for line in warnings:
        click.echo(f"hlo-run: warning: {line}", err=True)
    return rep


def _report_benchmark(b: dict, baseline, max_regression: float, result: dict) -> list[str]:
    """--benchmark N (and --baseline): print, record; the failures to report."""
    result["benchmark"] = b
    click.echo(f"benchmark: n={b['n']} median={b['median_s'] * 1e3:.3f} ms "
               f"min={b['min_s'] * 1e3:.3f} ms mean={b['mean_s'] * 1e3:.3f} ms max={b['max_s'] * 1e3:.3f} ms "
               f"p10={b['p10_s'] * 1e3:.3f} ms p90={b['p90_s'] * 1e3:.3f} ms cv={b['cv']:.3f}")
    for label, key in (("host-to-host", "host_to_host"), ("device-resident", "device_resident")):
        if key in b:
            g = b[key]
            click.echo(f"  {label}: median={g['median_s'] * 1e3:.3f} ms "
                       f"min={g['min_s'] * 1e3:.3f} ms p90={g['p90_s'] * 1e3:.3f} ms")
    return _compare_baseline(b, baseline, max_regression, result) if baseline else []


def _benchmark(exe, args, n: int) -> dict:
    from ..debug.stats import summarize

    exe.run(args)  # warm-up: caches, lazy initialization
    times = []
    for _ in range(n):
        start = time.perf_counter()
        exe.run(args)
        times.append(time.perf_counter() - start)
    bench = summarize(times)
    if hasattr(exe, "time_device_resident"):
        _gpu_figures(exe, args, n, bench)
    return bench


def _gpu_figures(exe, args, n: int, bench: dict) -> None:
    """On GPUs: `host_to_host` (the loop above: uploads, run, downloads; resident parameters
    are not uploaded again) and `device_resident` (inputs uploaded once, outputs left on the
    device: the main program alone, synchronized after each run)."""
    from ..debug.stats import summarize

    keys = ("n", "median_s", "min_s", "mean_s", "max_s", "p10_s", "p90_s", "cv")
    bench["host_to_host"] = {k: bench[k] for k in keys if k in bench}
    bench["device_resident"] = summarize(exe.time_device_resident(args, n))


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
RANK_PROFILE_RUNS = 3


def _profile_table(exe, args) -> str | None:
    exe.run_profiled(args)
    ranks = hasattr(exe, "collective_times")
    before = exe.collective_times() if ranks else None
    merged: dict[str, object] = {}
    runs, start = 0, time.perf_counter()
    # Ranks must agree on the number of runs: a fixed count, not a clock.
    limit = RANK_PROFILE_RUNS if ranks else PROFILE_RUNS
    while runs < limit and (ranks or runs == 0 or time.perf_counter() - start < PROFILE_SECONDS):
        _, rows = exe.run_profiled(args)
        runs += 1
        for r in rows:
            m = merged.setdefault(r.name, r.__class__(r.name, r.kind, r.ops))
            m.count += r.count
            m.seconds += r.seconds
            m.bytes += getattr(r, "bytes", 0)
    total = sum(r.seconds for r in merged.values()) or 1e-12
    lines = [f"profile: per run, mean of {runs} run(s) after a warm-up run",
             f"{'thunk':<32} {'kind':<18} {'count':>6} {'total ms':>10} {'%':>6}  ops"]
    for r in sorted(merged.values(), key=lambda r: -r.seconds):
        lines.append(f"{r.name[:32]:<32} {r.kind[:18]:<18} {r.count / runs:>6g} "
                     f"{r.seconds / runs * 1e3:>10.3f} {100 * r.seconds / total:>6.1f}  "
                     f"{_copy_ops(r)}")
    if ranks:
        after = exe.collective_times()
        if after is None:
            return None  # not rank 0
        lines.append("collectives per rank, per run: " + ", ".join(
            f"rank {i}: {(a[0] - b[0]) / runs:g} in {(a[1] - b[1]) / runs * 1e3:.3f} ms"
            for i, (a, b) in enumerate(zip(after, before, strict=True))))
        lines += _device_collectives_line(exe.collectives_summary())
    return "\n".join(lines)


def _device_collectives_line(summary: dict | None) -> list[str]:
    """A GPU rank's collective thunks: how many run as NCCL calls, which stay host-staged."""
    if summary is None:
        return []
    staged = summary["host_staged"]
    total = len(summary["nccl"]) + len(staged)
    line = (f"device collectives: {summary['engine']}, {len(summary['nccl'])} of {total} "
            f"collective thunk(s) as NCCL calls")
    if summary.get("reason"):
        line += f": {summary['reason']}"
    elif staged:
        line += "; host-staged: " + "; ".join(f"{n} ({why})" for n, why in staged.items())
    return [line]


def _copy_ops(row) -> str:
    """A copy row's ops column: arrays, bytes and GB/s; other rows' HLO op names."""
    if not row.kind.startswith("copy-"):
        return row.ops
    rate = row.bytes / row.seconds / 1e9 if row.seconds > 0 else 0.0
    return f"{row.ops}, {row.bytes / row.count / 2**20:.3f} MiB, {rate:.2f} GB/s"


def main() -> None:
    from ..util.safe_write import install_sigterm_cleanup

    np.seterr(all="ignore")
    install_sigterm_cleanup()
    try:
        cli(prog_name="hlo-run")
    except SystemExit as e:  # click ends every command so
        if "mpi4py.MPI" in sys.modules:
            # A rank of a multi-process run: MPI's own shutdown runs at interpreter exit.
            # (Ending such a rank without it, even after MPI_Finalize, made mpiexec kill a
            # rank now and then: test_mpi's emulated-NCCL run, about one run in four.)
            raise
        exit_without_teardown(e.code)


if __name__ == "__main__":
    main()
