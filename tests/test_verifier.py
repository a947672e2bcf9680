"""Verifier: one deliberately broken module per rule, checked for the exact message fragment,
plus a valid module of every control-flow kind and a 20,000-instruction timing check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hloc.errors import VerifyError
from hloc.ir import AliasEntry, Instruction, Layout, Literal, Module, ModuleConfig, Opcode
from hloc.ir.verifier import verify

from .support.shapes import Builder, comparator, module_of, scalar_computation, sh, single_op_module

O = Opcode  # noqa: E741  (short alias, as in hloc.ir.opcodes)


def broken(module: Module, fragment: str) -> VerifyError:
    with pytest.raises(VerifyError) as info:
        verify(module)
    assert fragment in str(info.value), str(info.value)
    return info.value


def while_module(cond_result: str = "pred[]", body_result: str = "s32[]") -> Module:
    c = Builder("cond")
    p = c.param("s32[]")
    limit = c.op(O.CONSTANT, "s32[]", literal=_lit(10, "s32"))
    c.op(O.COMPARE, "pred[]", p, limit, comparison_direction="LT")
    if cond_result != "pred[]":
        c.comp.root = p
    b = Builder("body")
    q = b.param("s32[]")
    one = b.op(O.CONSTANT, "s32[]", literal=_lit(1, "s32"))
    if body_result == "s32[]":
        b.op(O.ADD, "s32[]", q, one)
    else:
        b.op(O.CONVERT, body_result, b.op(O.ADD, "s32[]", q, one))
    e = Builder("main")
    x = e.param("s32[]")
    e.op(O.WHILE, "s32[]", x, called=(b.comp, c.comp))  # body first, as XLA
    return module_of(e.comp, c.comp, b.comp)


def _lit(value, et):
    return Literal.scalar(value, et)


def _zeros(shape: str) -> Literal:
    s = sh(shape)
    return Literal(s, np.zeros(s.dims, s.np_dtype))


def conditional_module(branch1_param: str = "f32[2]", branch1_result: str = "f32[2]") -> Module:
    t = Builder("on_true")
    t.op(O.NEGATE, "f32[2]", t.param("f32[2]"))
    f = Builder("on_false")
    p = f.param(branch1_param)
    if branch1_result == "f32[2]" and branch1_param == "f32[2]":
        f.op(O.COPY, "f32[2]", p)
    else:
        f.op(O.CONSTANT, branch1_result, literal=_zeros(branch1_result))
    e = Builder("main")
    pred, x = e.param("pred[]"), e.param("f32[2]")
    e.op(O.CONDITIONAL, "f32[2]", pred, x, x, called=(t.comp, f.comp))
    return module_of(e.comp, t.comp, f.comp)


# ---- valid modules ------------------------------------------------------------------------------
def test_valid_control_flow_modules_verify():
    assert verify(while_module()) is None
    assert verify(conditional_module()) is None
    assert verify(while_module(), all_errors=True) == []


def test_fusion_and_call_verify():
    f = Builder("fused")
    a, b = f.param("f32[3]"), f.param("f32[3]")
    f.op(O.MULTIPLY, "f32[3]", a, b)
    f.comp.is_fusion = True
    e = Builder("main")
    x, y = e.param("f32[3]"), e.param("f32[3]")
    fus = e.op(O.FUSION, "f32[3]", x, y, called=(f.comp,), fusion_kind="kLoop")
    assert verify(module_of(e.comp, f.comp)) is None
    fus.replace_operand(1, e.op(O.CONVERT, "s32[3]", y))
    e.comp.root = fus
    broken(module_of(e.comp, f.comp, name="m2"),
           "computation main, instruction %fusion: fusion: fused computation fused parameter 1 "
           "has shape f32[3] but is passed s32[3]")


# ---- per-instruction rules ----------------------------------------------------------------------
def test_operand_count():
    m, _ = single_op_module(O.ADD, "f32[2]", ["f32[2]"])
    broken(m, "computation main, instruction %add: add: takes 2 operand(s), got 1")


def test_called_computation_count():
    m, _ = single_op_module(O.REDUCE, "f32[]", ["f32[2]", "f32[]"], dimensions=(0,))
    broken(m, "reduce: calls 1 computation(s), got 0")


def test_declared_shape_must_match_inferred():
    m, _ = single_op_module(O.ADD, "f32[3]", ["f32[4]", "f32[4]"])
    broken(m, "instruction %add: add: declared shape f32[3] does not match the inferred "
              "shape f32[4]")


def test_constant_shape_comes_from_its_literal():
    b = Builder()
    c = b.op(O.CONSTANT, "f32[3]", literal=_zeros("f32[3]"))
    assert verify(module_of(b.comp)) is None
    c.with_attrs(literal=_zeros("f32[4]"))
    broken(module_of(b.comp, name="m2"), "constant: declared shape f32[3] does not match the "
                                         "inferred shape f32[4]")
    c.with_attrs(literal=None)  # HLO text may elide values: `constant({...})`
    assert verify(module_of(b.comp, name="m3")) is None


def test_element_type_is_checked_exactly():
    m, _ = single_op_module(O.NEGATE, "f64[4]", ["f32[4]"])
    broken(m, "declared shape f64[4] does not match the inferred shape f32[4]")


def test_layout_is_ignored_but_must_be_valid():
    m, instr = single_op_module(O.NEGATE, "f32[2,3]", ["f32[2,3]"])
    instr.shape = instr.shape.with_layout(Layout((0, 1)))
    assert verify(m) is None
    instr.shape = instr.shape.with_layout(Layout((0, 0)))
    broken(m, "layout {0,0} is not a permutation of the 2 dimensions")


def test_while_condition_must_return_pred():
    broken(while_module(cond_result="s32[]"), "condition computation cond must return pred[]")


def test_while_body_must_map_state_to_state():
    broken(while_module(body_result="f32[]"), "body computation body must return the loop state "
                                              "s32[], returns f32[]")


def test_conditional_branch_parameter_and_results():
    broken(conditional_module(branch1_param="f32[3]"),
           "branch 1 computation on_false parameter 0 has shape f32[3] but is passed f32[2]")
    broken(conditional_module(branch1_result="s32[2]"),
           "branch 1 (on_false) returns s32[2] but branch 0 returns f32[2]")


def test_reduce_computation_signature():
    add = scalar_computation("add", O.ADD, et="s32")
    m, _ = single_op_module(O.REDUCE, "f32[]", ["f32[4]", "f32[]"], called=(add,), dimensions=(0,))
    broken(m, "reducer add init value 0 has shape f32[], expected s32[] like its result 0")
    mul = scalar_computation("mul", O.MULTIPLY)
    mul.parameters[1].shape = sh("f32[2]")
    m, _ = single_op_module(O.REDUCE, "f32[]", ["f32[4]", "f32[]"], called=(mul,), dimensions=(0,))
    assert any("reducer mul parameter 1 has shape f32[2], expected f32[]" in str(e)
               for e in verify(m, all_errors=True))
    add2 = scalar_computation("add2", O.ADD, n=2)
    m, _ = single_op_module(O.REDUCE, "f32[]", ["f32[4]", "f32[]"], called=(add2,), dimensions=(0,))
    broken(m, "reducer computation add2 must take 2 parameter(s), takes 4")


def test_reduce_dimension_out_of_range():
    add = scalar_computation("add", O.ADD)
    m, _ = single_op_module(O.REDUCE, "f32[]", ["f32[4]", "f32[]"], called=(add,), dimensions=(1,))
    broken(m, "reduced dimension 1 is out of range for rank 1")


def test_sort_comparator_must_return_pred():
    add = scalar_computation("add", O.ADD)
    m, _ = single_op_module(O.SORT, "f32[4]", ["f32[4]"], called=(add,), dimensions=(0,))
    broken(m, "comparator add must return pred[], returns f32[]")


def test_scatter_update_computation():
    from hloc.ir import ScatterDimensionNumbers
    cmp = comparator("cmp", ["f32"])
    sdn = ScatterDimensionNumbers((1,), (0,), (0,), 1)
    m, _ = single_op_module(O.SCATTER, "f32[5,3]", ["f32[5,3]", "s32[4,1]", "f32[4,3]"],
                            called=(cmp,), scatter_dnums=sdn)
    broken(m, "update computation cmp parameter 0 has shape f32[], expected pred[]")


def test_transpose_dimensions_must_be_a_permutation():
    m, _ = single_op_module(O.TRANSPOSE, "f32[3,2]", ["f32[2,3]"], dimensions=(1, 1))
    broken(m, "transpose: dimensions {1,1} are not a permutation")


def test_get_tuple_element_index():
    m, _ = single_op_module(O.GET_TUPLE_ELEMENT, "f32[]", ["(f32[], s32[])"], tuple_index=2)
    broken(m, "get-tuple-element: index 2 is out of range for a tuple of 2")


def test_call_arity_and_map_signature():
    callee = Builder("callee")
    callee.op(O.NEGATE, "f32[2]", callee.param("f32[2]"))
    m, _ = single_op_module(O.CALL, "f32[2]", ["f32[2]", "f32[2]"], called=(callee.comp,))
    broken(m, "called computation callee must take 2 parameter(s), takes 1")
    add = scalar_computation("add", O.ADD)
    m, _ = single_op_module(O.MAP, "f32[2]", ["f32[2]"], called=(add,))
    broken(m, "mapped computation add must take 1 parameter(s), takes 2")


# ---- computation structure ----------------------------------------------------------------------
def test_parameter_numbers_unique_and_dense():
    b = Builder()
    b.param("f32[]")
    p = b.param("f32[]")
    p.with_attrs(parameter_number=2)
    b.op(O.ADD, "f32[]", *b.comp.instructions)
    broken(module_of(b.comp), "computation main: parameter numbers must be 0..1 without gaps; "
                              "1 is missing")
    p.with_attrs(parameter_number=0)
    broken(module_of(b.comp, name="m2"), "instruction %p1: parameter number 0 is also used by %p0")


def test_root_must_be_set():
    m, _ = single_op_module(O.NEGATE, "f32[2]", ["f32[2]"])
    m.entry.root = None
    broken(m, "computation main: has no root instruction")


def test_operands_live_in_the_same_computation():
    other = Builder("other")
    foreign = other.param("f32[2]")
    other.op(O.NEGATE, "f32[2]", foreign)
    b = Builder()
    b.param("f32[2]")
    b.comp.add(Instruction(O.NEGATE, sh("f32[2]"), [foreign], name="neg"))
    b.comp.root = b.comp.instructions[-1]
    errors = [str(e) for e in verify(module_of(b.comp, other.comp), all_errors=True)]
    assert "computation main, instruction %neg: operand 0 %p0 is not in computation main" in errors


def test_use_lists_are_consistent():
    m, instr = single_op_module(O.NEGATE, "f32[2]", ["f32[2]"])
    instr.operands[0].users.clear()
    broken(m, "instruction %negate: missing from the users of its operand %p0")
    instr.operands[0].users.append(instr)
    instr.operands[0].users.append(m.entry.instructions[0])
    broken(m, "lists %p0 as a user, but it is not an operand of it")


def test_cycles_are_rejected():
    b = Builder()
    x = b.param("f32[2]")
    a = b.op(O.NEGATE, "f32[2]", x, name="a")
    c = b.op(O.NEGATE, "f32[2]", a, name="c")
    a.replace_operand(0, c)
    broken(module_of(b.comp), "computation main: its instructions form a cycle")


def test_names_unique_in_module():
    m, instr = single_op_module(O.NEGATE, "f32[2]", ["f32[2]"])
    instr.name = "p0"
    broken(m, "instruction name p0 is used twice in the module")


def test_entry_must_exist():
    m, _ = single_op_module(O.NEGATE, "f32[2]", ["f32[2]"])
    m.entry = None
    broken(m, "module m: has no entry computation")


def test_recursion_is_rejected():
    b = Builder("f")
    x = b.param("f32[]")
    call = b.op(O.CALL, "f32[]", x, called=())
    call.called.append(b.comp)
    m = Module("m")
    m.add_computation(b.comp, entry=True)
    broken(m, "calls computation f recursively")


# ---- module configuration -----------------------------------------------------------------------
def test_schedule_rules():
    m, instr = single_op_module(O.NEGATE, "f32[2]", ["f32[2]"])
    m.schedule = {"main": ["p0", "negate"]}
    assert verify(m) is None
    m.schedule = {"main": ["negate", "p0"]}
    broken(m, "computation main: schedule puts %negate before its dependency %p0")
    m.schedule = {"main": ["p0"]}
    broken(m, "computation main: schedule misses %negate")
    m.schedule = {"main": ["p0", "p0", "negate"]}
    broken(m, "schedule lists %p0 twice")
    m.schedule = {"nope": []}
    broken(m, "schedule names unknown computation nope")


def test_input_output_alias_rules():
    b = Builder()
    x, y = b.param("f32[2]"), b.param("s32[2]")
    b.op(O.TUPLE, "(f32[2], s32[2])", b.op(O.NEGATE, "f32[2]", x), b.op(O.NEGATE, "s32[2]", y))
    m = module_of(b.comp)
    m.input_output_alias = (AliasEntry((0,), 0, ()), AliasEntry((1,), 1, ()))
    assert verify(m) is None
    m.input_output_alias = (AliasEntry((0,), 1, ()),)
    broken(m, "input_output_alias output {0} -> parameter 1 {}: shapes s32[2] and f32[2] differ")
    m.input_output_alias = (AliasEntry((2,), 0, ()),)
    broken(m, "names a buffer that does not exist")
    m.input_output_alias = (AliasEntry((0,), 0, ()), AliasEntry((0,), 0, ()))
    broken(m, "aliased twice")


def test_entry_layout_must_match():
    m, _ = single_op_module(O.NEGATE, "f32[2]", ["f32[2]"])
    m.config = ModuleConfig(entry_layout=((sh("f32[2]"),), sh("f32[3]")))
    broken(m, "entry computation layout result is f32[3], the root is f32[2]")


# ---- reporting ----------------------------------------------------------------------------------
def test_all_errors_and_path():
    m, instr = single_op_module(O.ADD, "f32[3]", ["f32[4]", "f32[4]"])
    m.entry.root = None
    errors = verify(m, all_errors=True, path="model.pb")
    assert [e.message.split(": ", 1)[0] for e in errors] == ["computation main",
                                                             "computation main, instruction %add"]
    assert all(str(e).startswith("model.pb: ") for e in errors)


# ---- performance --------------------------------------------------------------------------------
def big_module(n: int) -> Module:
    """n instructions: chains of elementwise ops, broadcasts, reductions and dots."""
    from hloc.ir import DotDimensionNumbers
    add = scalar_computation("add", O.ADD)
    b = Builder()
    x, w = b.param("f32[8,16]"), b.param("f32[16,16]")
    count = iter(range(n))

    def op(opcode, shape, *operands, **attrs):  # unique names keep module building linear
        return b.op(opcode, shape, *operands, name=f"{opcode.value}.{next(count)}", **attrs)

    zero = b.op(O.CONSTANT, "f32[]", literal=_lit(0.0, "f32"))
    dn = DotDimensionNumbers((1,), (0,))
    cur = x
    while len(b.comp.instructions) < n - 5:
        d = op(O.DOT, "f32[8,16]", cur, w, dot_dnums=dn)
        r = op(O.REDUCE, "f32[8]", d, zero, called=(add,), dimensions=(1,))
        bc = op(O.BROADCAST, "f32[8,16]", r, dimensions=(0,))
        cur = op(O.TANH, "f32[8,16]", op(O.ADD, "f32[8,16]", d, bc))
    return module_of(b.comp, add)


def test_verifies_20000_instructions():
    # Speed is measured in benchmarks/bench_frontend.py (`make bench`), not asserted here.
    m = big_module(20_000)
    assert m.instruction_count() >= 19_990
    verify(m)


# ---- XLA's own modules --------------------------------------------------------------------------
SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SAMPLE_FILES = sorted(p for pattern in ("*.pb", "*.hlo", "ops/*.pb", "ops/*.hlo")
                      for p in SAMPLES.glob(pattern))


def _load_sample(path: Path) -> Module:
    from hloc.frontend.load import load

    return load(str(path)).module


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_xla_sample_modules_verify(path):
    """JAX's modules and XLA's optimized ones (fusion, bitcast, copy, custom-call) are valid."""
    module = _load_sample(path)
    assert verify(module, all_errors=True, path=str(path)) == []


def test_a_corrupted_sample_is_rejected():
    candidates = [p for p in SAMPLE_FILES if p.name == "mlp.pb"]
    if not candidates:
        pytest.skip("samples/mlp.pb not generated")
    module = _load_sample(candidates[0])
    dot = next(i for c in module.computations for i in c.instructions if i.opcode == O.DOT)
    dot.shape = dot.shape.with_dims(dot.shape.dims[:-1] + (dot.shape.dims[-1] + 1,))
    with pytest.raises(VerifyError, match=f"instruction %{dot.name}: dot: declared shape"):
        verify(module)
