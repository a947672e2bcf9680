"""`hloc ops`: the op-coverage table (shape inference, interpreter, CPU, CUDA per opcode)."""

from __future__ import annotations

import json

import click

from .common import guarded


@click.command(name="ops")
@click.option("--json", "as_json", is_flag=True, help="machine-readable rows")
@click.option("--markdown", is_flag=True, help="the table as Markdown (docs/ops.md)")
@guarded("hloc ops")
def ops(as_json, markdown):
    """Which opcodes have shape inference, an interpreter rule, a CPU and a CUDA path."""
    from ..op_coverage import coverage, render_markdown, render_text

    rows = coverage()
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in rows], indent=1))
    elif markdown:
        click.echo(render_markdown(rows), nl=False)
    else:
        click.echo(render_text(rows))
