"""The shared rewrite driver (hloc/passes/rewrite.py) and pass plumbing of the optimization
passes: registration, options, fallbacks and analyses that golden text cannot show."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.errors import UnsupportedError
from hloc.ir import Opcode, Shape
from hloc.ir.text.parser import parse_module
from hloc.passes import lookup_pass, parse_spec
from hloc.passes.rewrite import (
    P,
    RuleTable,
    has_side_effects,
    is_splat_of,
    new,
    rewrite_computation,
    splat_value,
)
from hloc.passes.while_loop_simplifier import induction_variable, trip_count
from hloc.runtime.interpreter import evaluate

from .support.golden import results_equal
from .support.hlo import Builder, module_of, run_passes

pytestmark = pytest.mark.pure
Op = Opcode
F4 = "f32[4]"


# ---- the driver ------------------------------------------------------------------------------
def test_driver_adds_new_chains_and_removes_dead_code():
    """A rule returning a detached chain gets it added, uses redirected, old code removed."""
    table = RuleTable("t")

    @table.rule(P(Op.EXP))
    def exp_to_neg_neg(instr):
        x = instr.operands[0]
        return new(Op.NEGATE, instr.shape, [new(Op.NEGATE, instr.shape, [x])])

    b = Builder()
    x = b.param(F4)
    e = b.op(Op.EXP, F4, x)
    root = b.op(Op.ADD, F4, e, e)
    comp = b.finish(root)
    module_of(comp)
    stats = rewrite_computation(comp, table)
    assert stats.fired == {"exp_to_neg_neg": 1}
    assert [i.opcode for i in comp.instructions] == [Op.PARAMETER, Op.NEGATE, Op.NEGATE, Op.ADD]
    assert root.operands[0] is root.operands[1] and root.operands[0].opcode == Op.NEGATE
    assert e.parent is None and not x.users[0].opcode == Op.EXP


def test_driver_revisits_users_to_a_fixpoint():
    """neg(neg(neg(neg(x)))) folds completely, whatever order the rules see it in."""
    b = Builder()
    x = b.param(F4)
    cur = x
    for _ in range(6):
        cur = b.op(Op.NEGATE, F4, cur)
    module = module_of(b.finish(cur))
    assert run_passes(module, "simplify")
    assert module.entry.root is x and len(module.entry.instructions) == 1


def test_driver_rejects_shape_changes():
    table = RuleTable("t")

    @table.rule(P(Op.NEGATE))
    def bad(instr):
        return new(Op.RESHAPE, Shape.array("f32", [2, 2]), [instr.operands[0]])

    b = Builder()
    x = b.param(F4)
    comp = b.finish(b.op(Op.NEGATE, F4, x))
    module_of(comp)
    assert not rewrite_computation(comp, table).changed


def test_driver_terminates_on_cycling_rules():
    table = RuleTable("t")

    @table.rule(P(Op.NEGATE))
    def flip(instr):
        return new(Op.NEGATE, instr.shape, [instr.operands[0]])

    b = Builder()
    comp = b.finish(b.op(Op.NEGATE, F4, b.param(F4)))
    module_of(comp)
    stats = rewrite_computation(comp, table)
    assert 0 < stats.fired["flip"] <= 16 * 3 + 256


def test_driver_leaves_side_effects_alone():
    b = Builder()
    x = b.param(F4)
    z = b.splat(0, F4)
    effect = b.op(Op.CUSTOM_CALL, F4, x, z, custom_call_target="t",
                  custom_call_has_side_effect=True)
    module = module_of(b.finish(b.op(Op.TUPLE, Shape.tuple_of([x.shape]), effect)))
    run_passes(module, "simplify,fold,cse,dce")
    assert effect.parent is module.entry


def test_pattern_operands_and_splats():
    b = Builder()
    x = b.param(F4)
    n = b.op(Op.NEGATE, F4, b.op(Op.NEGATE, F4, x))
    assert P(Op.NEGATE, P(Op.NEGATE)).matches(n)
    assert not P(Op.NEGATE, P(Op.ABS)).matches(n)
    assert not P(Op.NEGATE, None, None).matches(n)
    assert splat_value(b.splat(2.5, F4)) == 2.5
    assert splat_value(b.const([1, 2, 1, 1])) is None
    assert is_splat_of(b.const([-0.0] * 4), -0.0) and not is_splat_of(b.const([-0.0] * 4), 0.0)
    assert splat_value(b.const(np.zeros((0,)))) is None


# ---- registry and options --------------------------------------------------------------------
@pytest.mark.parametrize("alias,name", [("simplify", "algebraic-simplifier"),
                                        ("fold", "constant-folding"), ("cse", "cse"),
                                        ("tuple-simplifier", "tuple-simplifier"),
                                        ("while-loop-simplifier", "while-loop-simplifier"),
                                        ("conditional-simplifier", "conditional-simplifier")])
def test_passes_registered(alias, name):
    cls = lookup_pass(alias)
    assert cls is not None and cls.name == name
    assert cls.summary() and "Guarantees" in cls.__doc__


def test_options_roundtrip():
    (fold,) = parse_spec("fold{max-elements=10}")
    assert fold.max_elements == 10 and fold.spec() == "constant-folding{max-elements=10}"
    (wl,) = parse_spec("while-loop-simplifier{licm=false}")
    assert wl.licm is False


# ---- constant folding fallbacks --------------------------------------------------------------
def test_fold_skips_what_the_interpreter_cannot_do(monkeypatch):
    import hloc.runtime.interpreter.registry as registry

    real = registry.lookup

    def lookup(instr):
        if instr.opcode == Op.EXP:
            raise UnsupportedError("no exp today")
        return real(instr)

    monkeypatch.setattr(registry, "lookup", lookup)
    b = Builder()
    c = b.const([1.0, 2.0, 3.0, 4.0])
    e = b.op(Op.EXP, F4, c)
    n = b.op(Op.NEGATE, F4, c)
    module = module_of(b.finish(b.op(Op.ADD, F4, e, n)))
    run_passes(module, "fold")
    root = module.entry.root
    assert root.opcode == Op.ADD and root.operands[0] is e
    assert root.operands[1].opcode == Op.CONSTANT
    assert list(root.operands[1].literal.array) == [-1.0, -2.0, -3.0, -4.0]


def test_side_effect_analysis_sees_through_calls():
    text = """HloModule m
inner {
  a = f32[] parameter(0)
  ROOT t = f32[] custom-call(a), custom_call_target="t", custom_call_has_side_effect=true
}
outer {
  a = f32[] parameter(0)
  ROOT c = f32[] call(a), to_apply=inner
}
ENTRY e {
  x = f32[] parameter(0)
  ROOT c = f32[] call(x), to_apply=outer
}"""
    module = parse_module(text)
    assert has_side_effects(module.entry.root)
    assert not has_side_effects(module.entry.parameters[0])


# ---- while loops -----------------------------------------------------------------------------
LOOP = """HloModule loop
cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(BOUND)
  ROOT c = pred[] compare(i, n), direction=DIR
}
body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] constant(STEP)
  ni = s32[] add(i, k)
  x = f32[4] get-tuple-element(p), index=1
  nx = f32[4] multiply(x, x)
  ROOT t = (s32[], f32[4]) tuple(ni, nx)
}
ENTRY e {
  x0 = f32[4] parameter(0)
  s = s32[] constant(START)
  init = (s32[], f32[4]) tuple(s, x0)
  ROOT w = (s32[], f32[4]) while(init), condition=cond, body=body
}"""


def loop(start, bound, step, direction="LT"):
    text = (LOOP.replace("START", str(start)).replace("BOUND", str(bound))
            .replace("STEP", str(step)).replace("DIR", direction))
    return parse_module(text)


@pytest.mark.parametrize("start,bound,step,direction,trips", [
    (0, 10, 1, "LT", 10), (0, 10, 3, "LT", 4), (10, 0, -2, "GT", 5), (5, 5, 1, "LT", 0),
    (5, 5, 1, "LE", 1), (0, 7, 7, "NE", 1), (2147483646, 0, 1, "GT", 2),
])
def test_trip_counts(start, bound, step, direction, trips):
    module = loop(start, bound, step, direction)
    iv = induction_variable(module.entry.root)
    assert iv is not None and iv.trip_count(100) == trips
    # The interpreter agrees: the counter ends at start + trips * step (wrapping).
    result = evaluate(module, [np.ones(4, np.float32)]).elements[0].array
    assert int(result) == int(np.array(start + trips * step).astype(np.int64).astype(np.int32))


def test_trip_count_beyond_limit_is_unknown():
    assert trip_count(loop(0, 10, 1).entry.root, limit=1) is None
    assert trip_count(loop(0, 1, 1).entry.root, limit=1) == 1


@pytest.mark.parametrize("start,bound", [(3, 3), (2, 3)])
def test_short_loops_disappear_with_the_same_result(start, bound):
    module = loop(start, bound, 1)
    args = [np.array([1.5, -2, 0.25, 3], np.float32)]
    before = evaluate(module, args)
    run_passes(module, "while-loop-simplifier,tuple-simplifier,dce")
    assert not any(i.opcode == Op.WHILE for c in module.computations for i in c.instructions)
    assert results_equal(before, evaluate(module, args))


def test_shared_body_is_cloned_before_editing():
    """Two loops share one body; changing one loop's state must not change the other."""
    text = """HloModule shared
cond {
  p = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT c = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  ni = s32[] add(i, one)
  x = f32[4] get-tuple-element(p), index=1
  y = f32[4] get-tuple-element(p), index=2
  nx = f32[4] add(x, x)
  ny = f32[4] multiply(y, x)
  ROOT t = (s32[], f32[4], f32[4]) tuple(ni, nx, ny)
}
ENTRY e {
  a = f32[4] parameter(0)
  s = s32[] constant(0)
  init = (s32[], f32[4], f32[4]) tuple(s, a, a)
  w1 = (s32[], f32[4], f32[4]) while(init), condition=cond, body=body
  w2 = (s32[], f32[4], f32[4]) while(init), condition=cond, body=body
  r1 = f32[4] get-tuple-element(w1), index=1
  r2 = f32[4] get-tuple-element(w2), index=2
  ROOT r = (f32[4], f32[4]) tuple(r1, r2)
}"""
    module = parse_module(text)
    args = [np.array([1, 2, 3, 4], np.float32)]
    before = evaluate(module, args)
    assert run_passes(module, "while-loop-simplifier")
    loops = [i for i in module.entry.instructions if i.opcode == Op.WHILE]
    sizes = sorted(len(w.shape.tuple_shapes) for w in loops)
    assert sizes == [2, 3]  # w1 lost y; w2 needs all three
    assert loops[0].while_body is not loops[1].while_body
    assert results_equal(before, evaluate(module, args))


@pytest.mark.parametrize("dtype,ones", [("u4", 15), ("s4", -1), ("u8", 255), ("s16", -1)])
def test_logic_rules_on_narrow_integers(dtype, ones):
    """x & ~0 → x and x | ~0 → ~0 also for the sub-byte types (ml_dtypes widths)."""
    b = Builder()
    x = b.param(f"{dtype}[4]")
    full = b.splat(ones, f"{dtype}[4]")
    a = b.op(Op.AND, f"{dtype}[4]", x, full)
    o = b.op(Op.OR, f"{dtype}[4]", full, x)
    root = b.op(Op.TUPLE, Shape.tuple_of([x.shape, x.shape]), a, o)
    module = module_of(b.finish(root))
    run_passes(module, "simplify")
    assert module.entry.root.operands[0] is x
    assert module.entry.root.operands[1] is full
