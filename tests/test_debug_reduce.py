"""`hloc reduce`: a real sample shrinks to a few instructions that still show the "bug"."""

from __future__ import annotations

from click.testing import CliRunner

from hloc.cli.main import cli as hloc_cli
from hloc.debug.reduce import Budget, Reducer, parse_checked
from hloc.ir import Opcode
from hloc.ir.text.printer import print_module

from .conftest import SAMPLES, require_samples


def hloc(*args):
    return CliRunner().invoke(hloc_cli, [str(a) for a in args], catch_exceptions=False)


def test_reduce_sample_with_script(tmp_path):
    require_samples()
    script = tmp_path / "interesting.sh"
    # C-Reduce's convention: exit 0 = still interesting (here: a dot and a tanh are left).
    script.write_text("grep -q ' dot(' \"$1\" && grep -q ' tanh(' \"$1\"\n")
    out = tmp_path / "small.hlo"
    r = hloc("reduce", SAMPLES / "mlp.hlo", "--script", f"sh {script}", "-o", out)
    assert r.exit_code == 0, r.output
    small = parse_checked(out.read_text())  # parses and verifies
    ops = sorted(i.opcode.value for c in small.computations for i in c.instructions)
    assert ops.count("dot") == 1 and ops.count("tanh") == 1
    assert small.instruction_count() <= 5 and len(small.computations) == 1, ops
    # Shapes shrink too: every dimension of every shape ended at size 1.
    assert all(d == 1 for i in small.entry.instructions for d in i.shape.dims)
    assert "reduced 72 instructions" in r.output


def _tanh_feeds_dot(text: str) -> bool:
    module = parse_checked(text)
    return any(i.opcode == Opcode.DOT and any(o.opcode == Opcode.TANH for o in i.operands)
               for c in module.computations for i in c.instructions)


def test_reducer_keeps_a_structural_predicate():
    # In-process predicate (the Reducer API): a dot with a tanh operand, in a gradient sample.
    require_samples()
    from hloc.frontend import load

    text = print_module(load(SAMPLES / "grads.hlo").module)
    reducer = Reducer(text, _tanh_feeds_dot, Budget(max_tests=2000, seconds=60))
    small = reducer.run()
    assert _tanh_feeds_dot(small)
    assert parse_checked(small).instruction_count() <= 5 < parse_checked(text).instruction_count()


def test_not_interesting_exit_1(tmp_path):
    require_samples()
    r = hloc("reduce", SAMPLES / "mlp.hlo", "--script", "grep -q ' cosine('", "-o", tmp_path / "s.hlo")
    assert r.exit_code == 1 and "does not find the module interesting" in r.output
    assert "Traceback" not in r.output


def test_missing_model_exit_2(tmp_path):
    r = hloc("reduce", tmp_path / "none.hlo", "--script", "true", "-o", tmp_path / "s.hlo")
    assert r.exit_code == 2
