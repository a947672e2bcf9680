"""What `hloc compile` does once its command line is read, without click.

The click command (cli/main.py) and the command line read here for the common forms
(`read_argv`, from cli/entry.py: click and the rest of the CLI cost a cold compile 10-12 ms
of imports) both call `compile_command` with the same parameters. `read_argv` answers only
for lines it reads exactly as click does (tests/test_cli_compile_argv.py compares the two
over many lines); anything else, `--help`, a usage error or an option it does not know,
goes to click.
"""

from __future__ import annotations

import contextlib
import os
import sys

from ..errors import InputError
from .common import about_file, debug_enabled, echo_err, setup_logging

# Options read here: value options (click's default when absent) and flags.
_VALUES = {"-o": "output", "--output": "output", "--target": "target", "--cpu": "cpu",
           "--cpu-features": "cpu_features", "--passes": "passes", "--pipeline": "pipeline_file",
           "--dump-dir": "dump_dir", "--dump-after": "dump_after",
           "--dump-format": "dump_format", "--stop-after": "stop_after", "--sign-key": "sign_key"}
_REPEATED = {"--cuda-arch": "cuda_arch", "--disable-pass": "disable_pass"}
_FLAGS = {"-O0": "O0", "-O1": "O1", "-O2": "O2", "-O3": "O3", "--time-passes": "time_passes",
          "--no-cache": "no_cache", "--debug": "debug"}
DEFAULTS = {"model": None, "output": None, "target": "cpu", "cuda_arch": (), "cpu": None,
            "cpu_features": None, "O0": False, "O1": False, "O2": False, "O3": False,
            "passes": None, "disable_pass": (), "pipeline_file": None, "dump_dir": None,
            "dump_after": None, "dump_format": "text", "stop_after": None, "time_passes": False,
            "check_determinism": 0, "sign_key": None, "no_cache": False, "debug": False}


def read_argv(args: list[str]) -> dict | None:
    """The compile command's parameters from `args` (what follows `compile`), as click would
    give them, or None for a line left to click."""
    params: dict = dict(DEFAULTS)
    seen: set[str] = set()
    repeated: dict[str, list[str]] = {}
    models: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            models.append(arg)
            continue
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in _FLAGS and not eq:
            key = _FLAGS[name]
        elif name in _VALUES or name in _REPEATED:
            if not eq:
                if i == len(args) or args[i].startswith("-"):
                    return None  # click's to take (or to refuse)
                value = args[i]
                i += 1
            if name in _REPEATED:
                repeated.setdefault(_REPEATED[name], []).append(value)
                continue
            key = _VALUES[name]
        else:
            return None  # --help, an option click reads otherwise, or a mistake
        if key in seen:
            return None
        seen.add(key)
        params[key] = True if name in _FLAGS else value
    if len(models) != 1 or params["output"] is None:
        return None
    params["model"] = models[0]
    for key, values in repeated.items():
        params[key] = tuple(values)
    return params


def compile_command(model, output, target, cuda_arch, cpu, cpu_features, O0, O1, O2, O3, passes,
                    disable_pass, pipeline_file, dump_dir, dump_after, dump_format, stop_after,
                    time_passes, check_determinism, sign_key, no_cache, debug,
                    determinism_argv=None) -> None:
    """`hloc compile` with its parameters read. `determinism_argv`: the command line that
    --check-determinism reruns (click's command gives it)."""
    _single_threaded_blas()
    if check_determinism:
        from ..debug import determinism

        print(determinism.check_determinism(check_determinism, determinism_argv, output,
                                            dump_dir), flush=True)
        return
    from ..bundle import write_bundle
    from ..compiler import CompileOptions, compile_model
    from ..util.safe_write import check_output_path

    setup_logging(debug_enabled(debug))
    check_output_path(output)
    key = None
    if sign_key:
        from ..bundle.signing import load_key

        key = load_key(sign_key, signing=True)
    options = CompileOptions(
        target=target, cuda_archs=tuple(cuda_arch) or ("sm_80",), cpu=cpu, cpu_features=cpu_features,
        opt_level=opt_level({"O0": O0, "O1": O1, "O2": O2, "O3": O3}), passes=passes,
        disabled_passes=tuple(disable_pass), pipeline_file=pipeline_file, stop_after=stop_after,
        verify_each_pass=debug_enabled(debug))
    dump_options = _dump_options(dump_dir, dump_after, dump_format)
    if not (no_cache or dump_options or stop_after or time_passes or options.verify_each_pass):
        from ..cached_compile import compile_cached

        with _progress() as progress, about_file(model):
            manifest, members = compile_cached(model, options, progress=progress)
        write_bundle(output, manifest=manifest, members=members, sign_key=key)
        return
    with _progress() as progress, about_file(model):
        result = compile_model(model, options, dump_options=dump_options, progress=progress)
    if time_passes:
        echo_err(result.pass_timing_table)
    if result.stopped_after is None:
        write_bundle(output, manifest=result.manifest, members=result.members, sign_key=key)


def opt_level(flags: dict) -> int:
    chosen = [int(k[1]) for k, v in flags.items() if v]
    if len(chosen) > 1:
        raise InputError("give at most one of -O0, -O1, -O2, -O3")
    return chosen[0] if chosen else 2


def _single_threaded_blas() -> None:
    """One OpenBLAS thread unless the user chose otherwise: a compile's NumPy work (constant
    folding) is small, and starting OpenBLAS's pool of a thread per core when NumPy is
    imported costs a whole-command compile about 20 ms of CPU time."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@contextlib.contextmanager
def _progress():
    """A progress indicator on a terminal (None elsewhere), cleared at the end."""
    progress = _Progress() if sys.stderr.isatty() else None
    try:
        yield progress
    finally:
        if progress:
            progress.done()


class _Progress:
    """A one-line stage indicator on a terminal (never in pipes or CI logs)."""

    def __init__(self):
        self.width = 0

    def __call__(self, stage: str) -> None:
        text = f"hloc: {stage}..."
        echo_err("\r" + text.ljust(self.width), nl=False)
        self.width = len(text)

    def done(self) -> None:
        echo_err("\r" + " " * self.width + "\r", nl=False)


def _dump_options(dump_dir, dump_after, dump_format):
    directory = dump_dir or os.environ.get("HLOC_DUMP_DIR")
    if not directory:
        return None
    from ..dump import DumpOptions

    return DumpOptions(directory, dump_after, DumpOptions.parse_formats(dump_format))
