"""Golden tests for layout assignment."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.ir import Layout, Opcode
from hloc.ir.text.parser import parse_module
from hloc.runtime.interpreter import evaluate

from .support.golden import golden, results_equal
from .support.hlo import run_passes

pytestmark = pytest.mark.pure


def layouts(module) -> set[tuple[int, ...]]:
    """Every minor_to_major used by an array shape anywhere in the module."""
    out = set()
    for comp in module.computations:
        for instr in comp.instructions:
            for _, leaf in instr.shape.leaves():
                if leaf.is_array and leaf.rank:
                    out.add(leaf.layout.minor_to_major)
    return out


def test_inner_layouts_become_row_major():
    module, _ = golden("""
HloModule inner
ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  t = f32[3,2]{0,1} transpose(x), dimensions={1,0}
  n = f32[3,2]{0,1} negate(t)
  ROOT r = f32[3,2]{1,0} copy(n)
}
""", "layout-assignment", """
        CHECK: %t = f32[3,2]{1,0} transpose(%x), dimensions={1,0}
        CHECK: %n = f32[3,2]{1,0} negate(%t)
    """)
    assert layouts(module) == {(1, 0)}


def test_entry_parameter_layout_is_kept_and_copied_once():
    module, _ = golden("""
HloModule param_layout, entry_computation_layout={(f32[2,3]{0,1})->f32[2,3]{1,0}}
ENTRY e {
  x = f32[2,3]{0,1} parameter(0)
  a = f32[2,3] negate(x)
  ROOT b = f32[2,3] add(a, x)
}
""", "layout-assignment", """
        CHECK: %x = f32[2,3]{0,1} parameter(0)
        CHECK: %_ = f32[2,3]{1,0} copy(%x)
        CHECK: %a = f32[2,3]{1,0} negate(%_)
        CHECK: ROOT %b = f32[2,3]{1,0} add(%a, %_)
    """)
    assert sum(i.opcode == Opcode.COPY for i in module.entry.instructions) == 1


def test_entry_result_layout_is_produced_at_the_root():
    module, _ = golden("""
HloModule result_layout, entry_computation_layout={(f32[4,5]{1,0})->(f32[5,4]{0,1}, f32[4,5]{1,0})}
ENTRY e {
  x = f32[4,5] parameter(0)
  t = f32[5,4]{0,1} transpose(x), dimensions={1,0}
  n = f32[4,5] negate(x)
  ROOT r = (f32[5,4]{0,1}, f32[4,5]) tuple(t, n)
}
""", "layout-assignment", """
        CHECK: %t = f32[5,4]{1,0} transpose(%x)
        CHECK: %_ = f32[5,4]{0,1} copy(%t)
        CHECK: ROOT %_ = (f32[5,4]{0,1}, f32[4,5]{1,0}) tuple(
    """)
    params, result = module.config.entry_layout
    assert result.tuple_shapes[0].layout == Layout((0, 1))
    assert module.entry.root.shape == result


def test_entry_layout_can_be_made_row_major():
    module, printed = golden("""
HloModule result_layout, entry_computation_layout={(f32[4,5]{0,1})->f32[5,4]{0,1}}
ENTRY e {
  x = f32[4,5]{0,1} parameter(0)
  ROOT t = f32[5,4]{0,1} transpose(x), dimensions={1,0}
}
""", "layout-assignment{honor-entry-layout=false}")
    assert "copy(" not in printed
    assert layouts(module) == {(1, 0)}
    assert module.config.entry_layout[1].layout == Layout((1, 0))


def test_layout_dependent_bitcast_becomes_logical_ops():
    module, _ = golden("""
HloModule bitcast
ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  t = f32[3,2]{0,1} transpose(x), dimensions={1,0}
  b = f32[2,3]{1,0} bitcast(t)
  ROOT r = f32[2,3] negate(b)
}
""", "layout-assignment")
    assert Opcode.BITCAST not in {i.opcode for i in module.entry.instructions}
    assert layouts(module) == {(1, 0)}


def test_row_major_bitcast_is_kept():
    module, _ = golden("""
HloModule bitcast2
ENTRY e {
  x = f32[2,6]{1,0} parameter(0)
  ROOT b = f32[3,4]{1,0} bitcast(x)
}
""", "layout-assignment")
    assert module.entry.root.opcode == Opcode.BITCAST


def test_nested_computations_and_tuples_get_layouts():
    module, _ = golden("""
HloModule loop
body {
  p = (s32[], f32[2,2]{0,1}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[2,2]{0,1} get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  v2 = f32[2,2]{0,1} transpose(v), dimensions={1,0}
  ROOT t = (s32[], f32[2,2]{0,1}) tuple(i2, v2)
}
cond {
  p = (s32[], f32[2,2]{0,1}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  x = f32[2,2] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[2,2]{0,1}) tuple(zero, x)
  w = (s32[], f32[2,2]{0,1}) while(init), condition=cond, body=body
  ROOT r = f32[2,2] get-tuple-element(w), index=1
}
""", "layout-assignment")
    assert layouts(module) == {(1, 0)}


def test_custom_call_operand_layout_constraints_get_copies():
    module = parse_module("""
HloModule cc
ENTRY e {
  x = f32[2,3] parameter(0)
  ROOT c = f32[2,3] custom-call(x), custom_call_target="k", operand_layout_constraints={f32[2,3]{0,1}}
}
""")
    run_passes(module, "layout-assignment")
    call = module.entry.root
    assert call.operands[0].opcode == Opcode.COPY
    assert call.operands[0].shape.layout == Layout((0, 1))


def test_values_are_unchanged_on_random_inputs():
    text = """
HloModule mix, entry_computation_layout={(f32[3,4]{0,1}, f32[4]{0})->f32[4,3]{0,1}}
ENTRY e {
  x = f32[3,4]{0,1} parameter(0)
  v = f32[4] parameter(1)
  b = f32[3,4]{0,1} broadcast(v), dimensions={1}
  s = f32[3,4]{0,1} add(x, b)
  ROOT t = f32[4,3]{0,1} transpose(s), dimensions={1,0}
}
"""
    module = parse_module(text)
    args = [np.arange(12, dtype=np.float32).reshape(3, 4), np.ones(4, np.float32)]
    before = evaluate(module, args)
    run_passes(module, "layout-assignment")
    assert results_equal(before, evaluate(module, args))
    assert np.array_equal(evaluate(module, args).array, (args[0] + 1).T)


def test_layout_changing_copies_stay_out_of_fusions():
    module, _ = golden("""
HloModule edge, entry_computation_layout={(f32[3,4]{0,1})->f32[3,4]{0,1}}
ENTRY e {
  x = f32[3,4]{0,1} parameter(0)
  n = f32[3,4] negate(x)
  ROOT a = f32[3,4] abs(n)
}
""", "layout-assignment,fusion")
    copies = [i for i in module.entry.instructions if i.opcode == Opcode.COPY]
    assert len(copies) == 2  # in from {0,1} and back out to {0,1}, each its own kernel
    fused = [i for c in module.computations if c.is_fusion for i in c.instructions]
    assert Opcode.COPY not in {i.opcode for i in fused}
