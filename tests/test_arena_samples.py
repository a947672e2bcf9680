"""Every sample through copy insertion, scheduling, buffer assignment and thunk emission, then
executed by the arena executor over the assigned memory (the thunk program read back from its
JSON form), with a shadow audit of every read. Results must equal the reference interpreter's
bit for bit and XLA's expected outputs within the sample's tolerance; the assignment must
satisfy the sharing properties (tests/support/buffers.check_plan)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hloc.thunks import program_from_json, program_to_json
from tests.conftest import SAMPLES, sample_arrays, sample_meta, sample_names
from tests.test_interp_samples import mismatch

from .support.buffers import interpret, plan_checked, prepare, run_audited, same_bits

pytestmark = pytest.mark.pure

CASES = [(name, suffix) for name in sample_names() + sample_names("ops")
         for suffix in (".pb", ".opt.pb") if (SAMPLES / f"{name}{suffix}").exists()]


@pytest.mark.parametrize("name,suffix", CASES, ids=[f"{n}{s}" for n, s in CASES])
def test_sample_runs_in_arena(name, suffix):
    # Layout assignment as every compile runs it: a raw module's inner layouts are hints
    # (jax gives a while body's root the column-major layout of a LAPACK result while the
    # loop's state is row-major), and a buffer shared by the two must have one layout.
    module = prepare(SAMPLES / f"{name}{suffix}", "inline,dce,layout-assignment")
    args = sample_arrays(name, "inputs")
    reference = interpret(module, args)
    plan = plan_checked(module, target="cuda" if suffix == ".pb" else "cpu")
    program = program_from_json(program_to_json(plan.program))
    assert program == plan.program
    got = run_audited(replace(plan, program=program), args)
    assert len(got) == len(reference)
    for i, (g, r) in enumerate(zip(got, reference, strict=True)):
        assert same_bits(g, r), f"out{i} differs from the interpreter"
    meta = sample_meta(name)
    expected = sample_arrays(name, "expected")
    problems = [f"out{i}: {why}" for i, (g, e, d) in enumerate(zip(got, expected, meta["outputs"],
                                                                    strict=True))
                if (why := mismatch(g, e, d)) is not None]
    assert not problems, "; ".join(problems)


def test_corpus_present():
    if not CASES:
        pytest.skip("no samples generated")
    assert any(s == ".opt.pb" for _, s in CASES)
