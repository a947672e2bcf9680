"""topk-rewriter (hloc/passes/topk_rewriter.py): sort-then-slice of the first k becomes XLA
CPU's TopK custom call, computed by selection, with the sort's values and positions."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.ir import Opcode
from hloc.ir.text.parser import parse_module

from .support.hlo import opcodes, run_passes
from .support.run import compare_with_interpreter

pytestmark = pytest.mark.cpu

# As JAX lowers lax.approx_max_k on the CPU: a sort of (keys, iota) and slices of both.
SORT_SLICE = """HloModule tk
cmp {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT gt = pred[] compare({lhs}, {rhs}), direction={direction}
}}
ENTRY e {{
  x = {t}[{rows},{n}]{{1,0}} parameter(0)
  io = s32[{n}]{{0}} iota(), iota_dimension=0
  pos = s32[{rows},{n}]{{1,0}} broadcast(io), dimensions={{{iota_dim}}}
  s = ({t}[{rows},{n}]{{1,0}}, s32[{rows},{n}]{{1,0}}) sort(x, pos), dimensions={{1}}, to_apply=cmp
  v = {t}[{rows},{n}]{{1,0}} get-tuple-element(s), index=0
  vk = {t}[{rows},{k}]{{1,0}} slice(v), slice={{[0:{rows}], [0:{k}]}}
  p = s32[{rows},{n}]{{1,0}} get-tuple-element(s), index=1
  pk = s32[{rows},{k}]{{1,0}} slice(p), slice={{[0:{rows}], [0:{k}]}}
  ROOT o = ({t}[{rows},{k}]{{1,0}}, s32[{rows},{k}]{{1,0}}) tuple(vk, pk)
}}
"""


def _text(t="f32", rows=4, n=300, k=5, lhs="a", rhs="b", direction="GT", iota_dim=1):
    return SORT_SLICE.format(t=t, rows=rows, n=n, k=k, lhs=lhs, rhs=rhs, direction=direction,
                             iota_dim=iota_dim)


@pytest.mark.parametrize("case,rewritten", [
    ({}, True),
    ({"direction": "LT"}, True),           # any comparator on the keys
    ({"lhs": "i", "rhs": "j"}, False),     # the comparator reads the positions
    ({"k": 200}, False),                   # k near n: the whole row is sorted either way
    ({"k": 300}, False),                   # no slice at all is shorter
])
def test_first_k_of_a_sort_becomes_topk(case, rewritten):
    module = parse_module(_text(**case))
    assert run_passes(module, "topk-rewriter") == rewritten
    ops = opcodes(module.entry)
    assert ("custom-call" in ops) == rewritten and ("sort" in ops) != rewritten


def test_other_uses_keep_the_sort():
    """A use of the whole sorted row (here the sorted values' sum) keeps the sort."""
    text = _text().replace("ROOT o = (f32[4,5]{1,0}, s32[4,5]{1,0}) tuple(vk, pk)",
                           "ROOT o = (f32[4,5]{1,0}, s32[4,5]{1,0}, f32[4,300]{1,0}) "
                           "tuple(vk, pk, v)")
    module = parse_module(text)
    assert not run_passes(module, "topk-rewriter")
    assert Opcode.SORT.value in opcodes(module.entry)


def test_topk_matches_the_sort_it_replaces(tmp_path):
    """Compiled for the CPU (the custom call by selection) against the interpreter running
    the unrewritten sort: the same values and positions, ties in index order, s32 keys too.
    (With NaNs a float compare is no order at all; XLA leaves the result unspecified.)"""
    rng = np.random.default_rng(3)
    ties = rng.integers(0, 6, (4, 300)).astype(np.float32)
    floats = rng.standard_normal((4, 300)).astype(np.float32)
    ints = rng.integers(-50, 50, (3, 1000)).astype(np.int32)
    cases = {
        "ties": (_text(), [ties]),
        "largest": (_text(k=40), [floats]),
        "smallest": (_text(direction="LT", k=64), [floats]),
        "s32": (_text(t="s32", rows=3, n=1000, k=100), [ints]),
    }
    outcomes = compare_with_interpreter(cases, "cpu", tmp=tmp_path)
    assert set(outcomes) == set(cases)


def test_the_interpreter_sorts_with_a_comparator_that_is_no_order():
    """GT on floats with NaNs is no strict weak order: the interpreter's merge counts then
    disagreed, left slots of its result unwritten and crashed indexing with them. It now
    merges such a level step by step: some permutation, every element once."""
    from hloc.runtime.interpreter import evaluate

    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 300)).astype(np.float32)
    x[:, ::7] = np.nan
    text = _text(k=299)
    values, positions = evaluate(parse_module(text), [x]).flatten()
    for row in range(4):
        assert len(set(positions[row].tolist())) == 299
        np.testing.assert_array_equal(values[row], x[row, positions[row]])
