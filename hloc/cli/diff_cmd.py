"""`hloc diff A B`: compare modules, bundles or dump directories (see hloc/debug/diff.py)."""

from __future__ import annotations

import json

import click

from ..errors import CheckFailed
from .common import guarded


@click.command(name="diff")
@click.argument("a", type=click.Path(dir_okay=True))
@click.argument("b", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--fail-on", "fail_on", multiple=True,
              help="gate METRIC>LIMIT (B-A above LIMIT) or METRIC>LIMIT% (relative to A); "
                   "metrics: instructions, computations, fusions, temp_bytes, argument_bytes, "
                   "output_bytes, constant_bytes, thunks, op:OPCODE, thunks:KIND (repeatable)")
@click.option("--no-hlo-diff", is_flag=True, help="leave out the HLO text diff")
@click.option("--debug", is_flag=True, help="tracebacks on internal errors")
@guarded("hloc")
def diff_cmd(a, b, as_json, fail_on, no_hlo_diff, debug):
    """Compare A (the baseline) with B: modules, bundles or --dump-dir directories.

    Exit 0, or 1 when a --fail-on gate is exceeded; 2 on bad usage or input.
    """
    from ..debug.diff import Gate, compare, format_report
    from ..debug.diff_load import load_side

    gates = [Gate.parse(g) for g in fail_on]
    result = compare(load_side(a), load_side(b), gates, hlo_diff=not no_hlo_diff)
    click.echo(json.dumps(result, indent=1, sort_keys=True) if as_json else format_report(result))
    failed = [g["gate"] for g in result["gates"] if g["failed"]]
    if failed:
        raise CheckFailed(f"gate(s) exceeded: {', '.join(failed)}", b)
