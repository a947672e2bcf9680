"""`hloc`: compile, optimize, inspect and convert HLO modules."""

from __future__ import annotations

import functools
import gc
import json
import os

import click

from .. import __version__
from ..errors import InputError
from .common import (
    debug_enabled,
    exit_status,
    exit_without_teardown,
    guarded,
    setup_logging,
)
from .compile_cmd import compile_command, opt_level

OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3")


def opt_level_options(fn):
    for level in reversed(range(4)):
        fn = click.option(f"-O{level}", f"O{level}", is_flag=True, help=f"pass set -O{level}"
                          + (" (default)" if level == 2 else ""))(fn)
    return fn


debug_option = click.option("--debug", is_flag=True, help="tracebacks on internal errors; verify after every pass")


class LazyGroup(click.Group):
    """A group whose commands from other modules are imported when they are run (or listed
    by --help), not at start: defining them cost every `hloc compile` a few ms."""

    LAZY = {"inspect": "inspect_cmd:inspect", "bisect": "bisect_cmd:bisect_cmd",
            "reduce": "reduce_cmd:reduce_cmd", "diff": "diff_cmd:diff_cmd",
            "extract": "extract_cmd:extract_cmd", "ops": "ops_cmd:ops",
            "server": "server_cmd:server_cmd"}

    def list_commands(self, ctx) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def get_command(self, ctx, cmd_name):
        if cmd_name in self.LAZY and cmd_name not in self.commands:
            module, name = self.LAZY[cmd_name].split(":")
            self.add_command(getattr(__import__(f"{__package__}.{module}", fromlist=[name]),
                                     name), cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="hloc")
def cli() -> None:
    """hloc: an ahead-of-time compiler driver for XLA HLO modules."""


def without_gc(fn):
    """Run the command with Python's cyclic garbage collector off: what a compile allocates
    lives until it ends, so each collection scans a growing heap for little garbage (10-17%
    of a compile's CPU time on the samples; the same peak memory compiling ResNet50)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return run


@cli.command()
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("-o", "--output", required=True, type=click.Path(), help="bundle file to write")
@click.option("--target", default="cpu", show_default=True, help="cpu, cuda or interpreter")
@click.option("--cuda-arch", "cuda_arch", multiple=True, help="sm_XX (repeatable; default sm_80)")
@click.option("--cpu", default=None, help="LLVM CPU name for cross-compiling (e.g. x86-64-v2)")
@click.option("--cpu-features", default=None, help="LLVM feature string, e.g. +avx2,-avx512f")
@opt_level_options
@click.option("--passes", default=None, help="replace the HLO pipeline with a spec string")
@click.option("--disable-pass", "disable_pass", multiple=True, help="skip a pass (repeatable)")
@click.option("--pipeline", "pipeline_file", default=None, help="JSON pipeline file")
@click.option("--dump-dir", default=None, help="dump every stage here (also HLOC_DUMP_DIR)")
@click.option("--dump-after", default=None, help="regex: only dump HLO after matching passes")
@click.option("--dump-format", default="text", show_default=True, help="text,proto,dot")
@click.option("--stop-after", default=None, help="passes, schedule, buffers, thunks, llvm, code")
@click.option("--time-passes", is_flag=True, help="print a per-pass timing table")
@click.option("--check-determinism", default=0, type=int, metavar="N",
              help="compile N times in separate processes (different PYTHONHASHSEED) and name the "
                   "first stage that differs; exit 1 if one does")
@click.option("--sign-key", default=None,
              help="sign the bundle with this key FILE (HMAC-SHA256, or Ed25519 PEM)")
@click.option("--no-cache", is_flag=True,
              help="always compile: neither read nor write the compile cache (HLOC_CACHE_DIR; "
                   "--dump-dir, --stop-after, --time-passes and --debug also bypass it, as they "
                   "need the stages to run)")
@debug_option
@guarded("hloc")
@without_gc
def compile(model, output, target, cuda_arch, cpu, cpu_features, O0, O1, O2, O3, passes,
            disable_pass, pipeline_file, dump_dir, dump_after, dump_format, stop_after,
            time_passes, check_determinism, sign_key, no_cache, debug):
    """Compile MODEL (HloModuleProto, HloProto, HloSnapshot, HloModuleProtoWithConfig or HLO text).

    An unchanged module compiled with the same flags, target and hloc is served from the
    compile cache ($HLOC_CACHE_DIR, default ~/.cache/hloc; HLOC_CACHE_DIR=off disables it):
    the bundle is byte-identical to a fresh compile. The compile runs in this hloc's compile
    server (`hloc server`) when one runs, without the start-up cost of a new process, and
    writes the same bundle; when none runs, it compiles here and then starts one in the
    background, which exits after 15 idle minutes (HLOC_SERVER=use: never start one;
    HLOC_SERVER=off: never use one).
    """
    argv = None
    if check_determinism:
        from ..debug import determinism

        ctx = click.get_current_context()
        argv = determinism.compile_argv(ctx.command, ctx.params)
    compile_command(model, output, target, cuda_arch, cpu, cpu_features, O0, O1, O2, O3, passes,
                    disable_pass, pipeline_file, dump_dir, dump_after, dump_format, stop_after,
                    time_passes, check_determinism, sign_key, no_cache, debug,
                    determinism_argv=argv)


@cli.command()
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("--passes", default=None, help="pass spec string (default: the -O pipeline)")
@opt_level_options
@click.option("--target", default="cpu", show_default=True, help="whose default pipeline to use")
@click.option("-o", "--output", default=None, help="write .hlo text or .pb proto instead of printing")
@click.option("--time-passes", is_flag=True, help="print a per-pass timing table")
@debug_option
@guarded("hloc")
def opt(model, passes, O0, O1, O2, O3, target, output, time_passes, debug):
    """Run HLO passes on MODEL and print (or write) the result."""
    from ..compiler import CompileOptions, run_passes
    from ..frontend import load, save
    from ..ir.text.printer import print_module
    from ..ir.verifier import verify

    setup_logging(debug_enabled(debug))
    module = load(model).module
    verify(module)
    options = CompileOptions(target=target, opt_level=opt_level({"O0": O0, "O1": O1, "O2": O2, "O3": O3}),
                             passes=passes, verify_each_pass=debug_enabled(debug))
    runner = run_passes(module, options, None)
    verify(module)
    if time_passes:
        click.echo(runner.timing_table(), err=True)
    if output:
        save(module, output, _format_from_extension(output))
    else:
        click.echo(print_module(module), nl=False)


def _format_from_extension(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext in (".hlo", ".txt"):
        return "hlo"
    if ext == ".pb":
        return "pb"
    raise InputError(f"cannot tell the output format from '{ext or path}': use .hlo or .pb", path)


@cli.command()
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("-o", "--output", required=True, help="OUT.hlo (text) or OUT.pb (HloModuleProto)")
@debug_option
@guarded("hloc")
def convert(model, output, debug):
    """Convert MODEL between HLO text and binary HloModuleProto."""
    from ..frontend import load, save

    fmt = _format_from_extension(output)
    save(load(model).module, output, fmt)


@cli.command()
@click.argument("model", type=click.Path(dir_okay=True))
@debug_option
@guarded("hloc")
def verify(model, debug):
    """Load and verify MODEL; print a summary (computations, instructions, opcode histogram)."""
    from ..frontend import load
    from ..ir.verifier import verify as verify_module

    loaded = load(model)
    module = loaded.module
    verify_module(module)
    click.echo(module_summary(module, loaded.form))


def module_summary(module, form: str) -> str:
    hist: dict[str, int] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            hist[instr.opcode.value] = hist.get(instr.opcode.value, 0) + 1
    lines = [f"module {module.name} ({form}): OK",
             f"  computations: {len(module.computations)} (entry {module.entry.name})",
             f"  instructions: {module.instruction_count()}",
             "  opcodes:"]
    for op, n in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"    {op:<28} {n}")
    return "\n".join(lines)


@cli.command(name="passes")
@click.option("--json", "as_json", is_flag=True, help="machine-readable list")
def passes_cmd(as_json):
    """List every pass with its description and options."""
    from ..passes import all_passes
    from ..passes.base import aliases_of

    rows = []
    for name, cls in all_passes().items():
        opts = [{"name": f.name.replace("_", "-"), "type": f.type if isinstance(f.type, str) else f.type.__name__,
                 "default": f.default} for f in cls.options()]
        rows.append({"name": name, "aliases": aliases_of(name), "summary": cls.summary(), "options": opts})
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    for r in rows:
        alias = f" (alias: {', '.join(r['aliases'])})" if r["aliases"] else ""
        click.echo(f"{r['name']}{alias}\n    {r['summary']}")
        for o in r["options"]:
            click.echo(f"    {{{o['name']}={o['default']}}}  ({o['type']})")


def main() -> None:
    from ..util.safe_write import install_sigterm_cleanup

    install_sigterm_cleanup()  # a killed compile leaves no temp file behind
    try:
        cli(prog_name="hloc")
    except SystemExit as e:  # click ends every command so
        exit_without_teardown(e.code)


def run(argv: list[str]) -> int:
    """The `hloc ARGV` command line in this process, returning its exit status instead of
    ending the process (a compile server's worker runs one command after another)."""
    from ..util.safe_write import install_sigterm_cleanup

    install_sigterm_cleanup()
    try:
        cli(args=argv, prog_name="hloc")
    except SystemExit as e:
        return exit_status(e.code)
    return exit_status(None)


if __name__ == "__main__":
    main()
