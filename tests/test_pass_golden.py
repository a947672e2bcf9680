"""Golden text tests for the optimization passes (lit / FileCheck style): every case of
tests/golden/passes/*.hlo (format in tests/support/golden.py), and every registered pass has
at least one."""

from __future__ import annotations

import pytest

from hloc.passes import Fixpoint, all_passes, parse_spec

from .support.golden import golden_cases, run_case

pytestmark = pytest.mark.pure
CASES = golden_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case):
    run_case(case)


def _pass_names(items) -> set[str]:
    names = set()
    for item in items:
        names |= _pass_names(item.passes) if isinstance(item, Fixpoint) else {item.name}
    return names


def test_every_registered_pass_has_a_golden_case():
    covered = set().union(*(_pass_names(parse_spec(c.spec)) for c in CASES))
    missing = sorted(set(all_passes()) - covered)
    assert not missing, f"passes without a case in tests/golden/passes/: {missing}"
