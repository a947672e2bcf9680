"""The op-coverage table (`hloc ops`): its columns, its facts, and docs/ops.md being current."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hloc.cli.main import cli
from hloc.ir import Opcode
from hloc.op_coverage import COLUMNS, HOST_FALLBACK, coverage, render_markdown

DOC = Path(__file__).resolve().parent.parent / "docs" / "ops.md"


@pytest.fixture(scope="module")
def rows():
    return {r.opcode: r for r in coverage()}


def test_one_row_per_opcode(rows):
    assert set(rows) == {o.value for o in Opcode}


def test_every_interpreted_opcode_has_shape_inference(rows):
    missing = sorted(n for n, r in rows.items() if r.interpreter and not r.shape_inference)
    assert not missing


def test_every_native_path_is_interpreted_or_storage(rows):
    """A backend that runs an opcode natively can be checked against the interpreter."""
    storage = {"parameter", "domain"}  # named storage, never evaluated on their own
    unchecked = sorted(n for n, r in rows.items()
                       if (r.cpu or r.cuda) and not r.interpreter and n not in storage)
    assert not unchecked


def test_host_fallbacks_are_exactly_the_documented_ones(rows):
    on_host = {n for n, r in rows.items() if r.cpu_path == "host"}
    assert on_host == {o.value for o in HOST_FALLBACK}
    assert all(rows[o.value].host_fallback and not rows[o.value].cpu for o in HOST_FALLBACK)


@pytest.mark.parametrize("opcode,cpu,cuda", [
    ("add", "elemental", "elemental"),
    ("dot", "thunk:gemm", "planner"),
    ("reduce", "segment", "planner"),
    ("while", "thunk:while", "thunk:while"),
    ("custom-call", "thunk:custom-call", "host"),  # CUDA runs custom-calls on the host
    ("cholesky", "host", "host"),
    ("batch-norm-training", "expanded", "expanded"),
    ("all-reduce", "thunk:collective", "thunk:collective"),
    ("partition-id", "thunk:device-id", "thunk:device-id"),
])
def test_known_paths(rows, opcode, cpu, cuda):
    r = rows[opcode]
    assert (r.cpu_path, r.cuda_path) == (cpu, cuda)
    assert r.cuda == (cuda not in ("host", "expanded", ""))


def test_cli_json_has_the_columns():
    result = CliRunner().invoke(cli, ["ops", "--json"], catch_exceptions=False)
    assert result.exit_code == 0
    table = json.loads(result.output)
    assert len(table) == len(Opcode)
    assert all(tuple(row) == COLUMNS for row in table)
    cc = next(row for row in table if row["opcode"] == "custom-call")
    assert cc["interpreter"] and cc["shape_inference"] and not cc["cuda"]


def test_cli_text_table():
    result = CliRunner().invoke(cli, ["ops"], catch_exceptions=False)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split() == ["opcode", "shape", "interp", "cpu", "cuda"]
    assert lines[-1].startswith(f"{len(Opcode)} opcodes:")
    assert any(ln.split()[:5] == ["cholesky", "yes", "yes", "host", "host"] for ln in lines)


def test_docs_ops_md_is_current():
    assert DOC.read_text() == render_markdown(coverage()), \
        "docs/ops.md is stale: run `hloc ops --markdown > docs/ops.md`"
