"""`hloc reduce`: a small module that still shows the bug (see hloc/debug/reduce.py)."""

from __future__ import annotations

import click

from ..errors import CheckFailed
from .common import debug_enabled, guarded, setup_logging


@click.command(name="reduce")
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("--script", required=True,
              help="`CMD FILE` exits 0 when FILE is still interesting (still shows the bug), as "
                   "in C-Reduce; note `hloc bisect --script` reads exit 0 as 'good'")
@click.option("-o", "--output", required=True, help="SMALL.hlo: the reduced module (updated as it shrinks)")
@click.option("--max-tests", default=5000, show_default=True, help="stop after this many script runs")
@click.option("--time-limit", default=600.0, show_default=True, help="stop after this many seconds")
@click.option("--script-timeout", default=60.0, show_default=True,
              help="seconds per script run; a timeout counts as not interesting")
@click.option("--debug", is_flag=True, help="tracebacks on internal errors; progress on stderr")
@guarded("hloc")
def reduce_cmd(model, script, output, max_tests, time_limit, script_timeout, debug):
    """Delta-debug MODEL to a small module for which `CMD FILE` still exits 0.

    Removes instructions (replacing their uses by new parameters, zero constants or operands),
    cuts the entry at an earlier root, shrinks dimension sizes, drops unused computations and
    parameters; every module tried passes hloc's verifier. Exit 0 with the result in -o; 1 when
    the script does not find MODEL itself interesting; 2 on bad usage or input.
    """
    from ..debug.predicates import run_script
    from ..debug.reduce import Budget, Reducer, parse_checked
    from ..frontend import load
    from ..ir.text.printer import print_module
    from ..ir.verifier import verify
    from ..util.fs import atomic_write

    setup_logging(debug_enabled(debug))
    module = load(model).module
    verify(module)
    text = print_module(module)
    rc = run_script(script, text, timeout=script_timeout)
    if rc != 0:
        status = "ran past the timeout" if rc is None else f"exited with status {rc}"
        raise CheckFailed(f"the script does not find the module interesting (it {status}); "
                          "nothing to reduce (exit 0 means interesting)", model)
    reducer = Reducer(text, lambda t: run_script(script, t, timeout=script_timeout) == 0,
                      Budget(max_tests, time_limit), lambda t: atomic_write(output, t))
    before = reducer.key
    atomic_write(output, text)
    small = reducer.run()
    after = parse_checked(small)
    click.echo(f"reduced {module.instruction_count()} instructions in {len(module.computations)} "
               f"computation(s) to {after.instruction_count()} in {len(after.computations)} "
               f"after {reducer.budget.tests} tests ({before[2]} -> {len(small)} characters): {output}")
