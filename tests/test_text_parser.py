"""HLO text parser and printer: one golden line per attribute form, module-level syntax, errors
with line:column, and a fuzz test that mutates real sample text.

Golden lines are written in XLA's own spelling (as XLA prints them); each must parse to the
stated attribute values and print back unchanged.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hloc.errors import ParseError
from hloc.ir import Opcode, PrimitiveType
from hloc.ir.attrs import (
    OpMetadata,
    OutputOperandAliasing,
    PaddingDim,
    SliceDim,
    WindowDimension,
)
from hloc.ir.text.parser import parse_module
from hloc.ir.text.printer import print_instruction, print_module

from .conftest import SAMPLES

# Helper computations use instruction names the tests below never reuse (XLA renames
# instructions whose names clash anywhere in the module).
ADD = "%add (add.x: f32[], add.y: f32[]) -> f32[] {\n  %add.x = f32[] parameter(0)\n  %add.y = f32[] parameter(1)\n  ROOT %add.r = f32[] add(%add.x, %add.y)\n}\n"
LT = "%lt (lt.a: f32[], lt.b: f32[]) -> pred[] {\n  %lt.a = f32[] parameter(0)\n  %lt.b = f32[] parameter(1)\n  ROOT %lt.r = pred[] compare(%lt.a, %lt.b), direction=LT\n}\n"
GE = LT.replace("lt", "ge").replace("direction=LT", "direction=GE")
NEG = "%neg (neg.n: f32[4]) -> f32[4] {\n  %neg.n = f32[4]{0} parameter(0)\n  ROOT %neg.r = f32[4]{0} negate(%neg.n)\n}\n"


def line(text: str, *decls: str, comps: str = ""):
    """Parse `text` as the root of an entry computation after `decls`; check it reprints."""
    body = "\n".join(f"  {d}" for d in (*decls, text))
    module = parse_module(f"HloModule t\n\n{comps}\nENTRY %e {{\n{body}\n}}\n")
    instr = module.entry.root
    assert print_instruction(instr) == text
    return instr


P4 = "%p = f32[4]{0} parameter(0)"
Q4 = "%q = f32[4]{0} parameter(1)"
S = "%s = f32[] parameter(0)"
M23 = "%m = f32[2,3]{1,0} parameter(0)"


# ---- shape-manipulating ops -----------------------------------------------------------------
def test_get_tuple_element_index():
    i = line("%g = f32[] get-tuple-element(%t), index=1", "%t = (s32[], f32[]) parameter(0)")
    assert i.attrs.tuple_index == 1


def test_broadcast_transpose_reverse_concatenate_dimensions():
    assert line("%b = f32[2,4]{1,0} broadcast(%p), dimensions={1}", P4).attrs.dimensions == (1,)
    assert line("%t = f32[3,2]{0,1} transpose(%m), dimensions={1,0}", M23).attrs.dimensions == (1, 0)
    assert line("%r = f32[2,3]{1,0} reverse(%m), dimensions={0,1}", M23).attrs.dimensions == (0, 1)
    assert line("%c = f32[8]{0} concatenate(%p, %q), dimensions={0}", P4, Q4).attrs.dimensions == (0,)


def test_broadcast_of_a_scalar_may_omit_dimensions():
    module = parse_module(f"HloModule t\nENTRY %e {{\n  {S}\n  ROOT %b = f32[3]{{0}} broadcast(%s)\n}}\n")
    assert module.entry.root.attrs.dimensions == ()
    assert print_instruction(module.entry.root) == "%b = f32[3]{0} broadcast(%s), dimensions={}"


def test_iota_and_reshape_dimension_attributes():
    assert line("%i = s32[4,3]{1,0} iota(), iota_dimension=1").attrs.dimensions == (1,)
    assert line("%r = f32[6]{0} reshape(%m), inferred_dimension=0", M23).attrs.dimensions == (0,)
    assert line("%r = f32[6]{0} reshape(%m)", M23).attrs.dimensions is None


def test_slice_prints_strides_only_when_some_stride_is_not_one():
    i = line("%x = f32[2,3]{1,0} slice(%m), slice={[0:2], [0:3]}", M23)
    assert i.attrs.slice == (SliceDim(0, 2, 1), SliceDim(0, 3, 1))
    i = line("%x = f32[1,2]{1,0} slice(%m), slice={[0:2:2], [1:3:1]}", M23)
    assert i.attrs.slice == (SliceDim(0, 2, 2), SliceDim(1, 3, 1))


def test_dynamic_slice_sizes_and_update():
    i = line("%d = f32[2]{0} dynamic-slice(%p, %i), dynamic_slice_sizes={2}", P4, "%i = s32[] parameter(1)")
    assert i.attrs.dynamic_slice_sizes == (2,)


def test_pad_with_and_without_interior_padding():
    i = line("%x = f32[10,4]{1,0} pad(%m, %s), padding=1_2_1x0_0_0",
             "%m = f32[4,4]{1,0} parameter(0)", "%s = f32[] parameter(1)")
    assert i.attrs.padding == (PaddingDim(1, 2, 1), PaddingDim(0, 0, 0))
    i = line("%x = f32[3,5]{1,0} pad(%m, %s), padding=0_1x-1_3", M23, "%s = f32[] parameter(1)")
    assert i.attrs.padding == (PaddingDim(0, 1, 0), PaddingDim(-1, 3, 0))


# ---- contractions ---------------------------------------------------------------------------
def test_convolution_window_and_dim_labels():
    i = line("%c = f32[1,2,7,3]{3,2,1,0} convolution(%x, %k), window={size=2x2 stride=2x1 "
             "pad=1_0x0_1 lhs_dilate=2x1 rhs_dilate=1x2 rhs_reversal=1x0}, dim_labels=bf01_oi01->bf01, "
             "feature_group_count=2, operand_precision={high,highest}",
             "%x = f32[1,4,4,4]{3,2,1,0} parameter(0)", "%k = f32[2,2,2,2]{3,2,1,0} parameter(1)")
    a = i.attrs
    assert a.window.dims == (WindowDimension(2, 2, 1, 0, 1, 2, True), WindowDimension(2, 1, 0, 1, 2, 1, False))
    d = a.conv_dnums
    assert (d.input_batch_dimension, d.input_feature_dimension, d.input_spatial_dimensions) == (0, 1, (2, 3))
    assert (d.kernel_output_feature_dimension, d.kernel_input_feature_dimension) == (0, 1)
    assert d.output_spatial_dimensions == (2, 3)
    assert a.feature_group_count == 2 and a.precision_config.operand_precision == (1, 2)


def test_dim_labels_with_spatial_first_layout():
    i = line("%c = f32[1,4,4,5]{3,2,1,0} convolution(%x, %k), window={size=3x3 pad=1_1x1_1}, "
             "dim_labels=b01f_01io->b01f",
             "%x = f32[1,4,4,4]{3,2,1,0} parameter(0)", "%k = f32[3,3,4,5]{3,2,1,0} parameter(1)")
    d = i.attrs.conv_dnums
    assert (d.input_batch_dimension, d.input_feature_dimension) == (0, 3)
    assert (d.kernel_input_feature_dimension, d.kernel_output_feature_dimension) == (2, 3)
    assert d.kernel_spatial_dimensions == (0, 1)


def test_dot_dimensions_precision_and_algorithm():
    i = line("%d = f32[2,4,4]{2,1,0} dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
             "rhs_batch_dims={0}, rhs_contracting_dims={1}, operand_precision={highest,default}, "
             "algorithm=dot_bf16_bf16_f32",
             "%a = f32[2,4,3]{2,1,0} parameter(0)", "%b = f32[2,3,4]{2,1,0} parameter(1)")
    d = i.attrs.dot_dnums
    assert (d.lhs_batch_dimensions, d.lhs_contracting_dimensions) == ((0,), (2,))
    assert (d.rhs_batch_dimensions, d.rhs_contracting_dimensions) == ((0,), (1,))
    assert i.attrs.precision_config.operand_precision == (2, 0)
    assert i.attrs.precision_config.algorithm == 6
    outer = line("%o = f32[4,4]{1,0} dot(%p, %q), lhs_contracting_dims={}, rhs_contracting_dims={}", P4, Q4)
    assert outer.attrs.dot_dnums.lhs_contracting_dimensions == ()


# ---- gather / scatter / sort ------------------------------------------------------------------
def test_gather_dimension_numbers():
    i = line("%g = f32[3,4]{1,0} gather(%a, %i), offset_dims={1}, collapsed_slice_dims={0}, "
             "start_index_map={0}, operand_batching_dims={2}, start_indices_batching_dims={0}, "
             "index_vector_dim=1, slice_sizes={1,4,1}, indices_are_sorted=true",
             "%a = f32[8,4,3]{2,1,0} parameter(0)", "%i = s32[3,1]{1,0} parameter(1)")
    g = i.attrs.gather_dnums
    assert (g.offset_dims, g.collapsed_slice_dims, g.start_index_map) == ((1,), (0,), (0,))
    assert (g.operand_batching_dims, g.start_indices_batching_dims, g.index_vector_dim) == ((2,), (0,), 1)
    assert i.attrs.gather_slice_sizes == (1, 4, 1) and i.attrs.indices_are_sorted is True


def test_scatter_dimension_numbers_and_update_computation():
    i = line("%x = f32[8,4]{1,0} scatter(%a, %i, %u), update_window_dims={1}, inserted_window_dims={0}, "
             "scatter_dims_to_operand_dims={0}, index_vector_dim=1, unique_indices=true, to_apply=%add",
             "%a = f32[8,4]{1,0} parameter(0)", "%i = s32[3,1]{1,0} parameter(1)",
             "%u = f32[3,4]{1,0} parameter(2)", comps=ADD)
    s = i.attrs.scatter_dnums
    assert (s.update_window_dims, s.inserted_window_dims, s.scatter_dims_to_operand_dims) == ((1,), (0,), (0,))
    assert s.index_vector_dim == 1 and i.attrs.unique_indices is True
    assert [c.name for c in i.called] == ["add"]


def test_sort_and_compare():
    i = line("%s = f32[4]{0} sort(%p), dimensions={0}, is_stable=true, to_apply=%lt", P4, comps=LT)
    assert i.attrs.is_stable is True and i.called[0].name == "lt"
    c = line("%c = pred[4]{0} compare(%p, %q), direction=GE", P4, Q4)
    assert (c.attrs.comparison_direction, c.attrs.comparison_type) == ("GE", "FLOAT")
    t = line("%c = pred[4]{0} compare(%p, %q), direction=LT, type=TOTALORDER", P4, Q4)
    assert t.attrs.comparison_type == "TOTALORDER"
    u = line("%c = pred[] compare(%a, %b), direction=EQ", "%a = u32[] parameter(0)", "%b = u32[] parameter(1)")
    assert u.attrs.comparison_type == "UNSIGNED"


# ---- called computations ----------------------------------------------------------------------
def test_reduce_map_call_and_reduce_window():
    i = line("%r = f32[] reduce(%p, %s), dimensions={0}, to_apply=%add", P4, "%s = f32[] parameter(1)", comps=ADD)
    assert i.attrs.dimensions == (0,) and i.called[0].name == "add"
    assert line("%m = f32[4]{0} map(%p, %q), dimensions={0}, to_apply=%add", P4, Q4, comps=ADD).called
    assert line("%c = f32[4]{0} call(%p), to_apply=%neg", P4, comps=NEG).called[0].name == "neg"
    w = line("%w = f32[2]{0} reduce-window(%p, %s), window={size=2 stride=2}, to_apply=%add",
             P4, "%s = f32[] parameter(1)", comps=ADD)
    assert w.attrs.window.dims == (WindowDimension(2, 2),)


def test_select_and_scatter_keeps_select_then_scatter():
    i = line("%x = f32[4]{0} select-and-scatter(%p, %q, %s), window={size=2 stride=2}, select=%ge, "
             "scatter=%add", P4, "%q = f32[2]{0} parameter(1)", "%s = f32[] parameter(2)", comps=GE + ADD)
    assert [c.name for c in i.called] == ["ge", "add"]


def test_while_stores_body_first_like_xla():
    cond = "%cond (cond.c: f32[4]) -> pred[] {\n  %cond.c = f32[4]{0} parameter(0)\n  ROOT %cond.t = pred[] constant(true)\n}\n"
    i = line("%w = f32[4]{0} while(%p), condition=%cond, body=%neg", P4, comps=cond + NEG)
    assert i.while_body.name == "neg" and i.while_condition.name == "cond"


def test_conditional_forms():
    i = line("%c = f32[4]{0} conditional(%b, %p, %p), true_computation=%neg, false_computation=%neg",
             "%b = pred[] parameter(1)", P4, comps=NEG)
    assert [c.name for c in i.called] == ["neg", "neg"]
    i = line("%c = f32[4]{0} conditional(%i, %p, %p), branch_computations={%neg, %neg}",
             "%i = s32[] parameter(1)", P4, comps=NEG)
    assert len(i.called) == 2


def test_fusion_kind_calls_and_aliasing():
    i = line("%f = f32[4]{0} fusion(%p), kind=kLoop, output_to_operand_aliasing={{}: (0, {})}, calls=%neg",
             P4, comps=NEG)
    assert i.attrs.fusion_kind == "kLoop" and i.called[0].is_fusion
    assert i.attrs.output_operand_aliasing == (OutputOperandAliasing((), 0, ()),)


# ---- other attributes ---------------------------------------------------------------------
def test_custom_call_attributes():
    i = line('%c = (f32[4]{0}, s32[]) custom-call(%p), custom_call_target="lapack_spotrf_ffi", '
             "operand_layout_constraints={f32[4]{0}}, custom_call_has_side_effect=true, "
             "output_to_operand_aliasing={{0}: (0, {})}, api_version=API_VERSION_TYPED_FFI, "
             "backend_config={uplo = 76 : ui8}", P4)
    a = i.attrs
    assert a.custom_call_target == "lapack_spotrf_ffi" and a.custom_call_api_version == 4
    assert [str(s) for s in a.operand_layout_constraints] == ["f32[4]{0}"]
    assert a.custom_call_has_side_effect is True and a.backend_config == "{uplo = 76 : ui8}"
    q = line('%c = f32[4]{0} custom-call(%p), custom_call_target="x\\"y", backend_config="a\\nb"', P4)
    assert (q.attrs.custom_call_target, q.attrs.backend_config) == ('x"y', "a\nb")


def test_fft_rng_precision_and_batch_norm():
    assert line("%f = c64[8]{0} fft(%c), fft_type=IFFT, fft_length={8}", "%c = c64[8]{0} parameter(0)").attrs.fft_type == 1
    assert line("%r = f32[4]{0} rng(%a, %b), distribution=rng_normal", "%a = f32[] parameter(0)",
                "%b = f32[] parameter(1)").attrs.distribution == 2
    r = line("%r = (u64[2]{0}, u32[3]{0}) rng-bit-generator(%k), algorithm=rng_philox", "%k = u64[2]{0} parameter(0)")
    assert r.attrs.rng_algorithm == 2
    assert line("%s = u64[2]{0} rng-get-and-update-state(), delta=16").attrs.delta == 16
    p = line("%r = f32[4]{0} reduce-precision(%p), exponent_bits=5, mantissa_bits=10", P4)
    assert (p.attrs.exponent_bits, p.attrs.mantissa_bits) == (5, 10)
    b = line("%b = (f32[2,4]{1,0}, f32[4]{0}, f32[4]{0}) batch-norm-training(%x, %p, %q), epsilon=0.001, "
             "feature_index=1", "%x = f32[2,4]{1,0} parameter(2)", P4, Q4)
    assert b.attrs.epsilon == pytest.approx(0.001) and b.attrs.feature_index == 1


def test_triangular_solve_cholesky_and_topk():
    t = line("%t = f32[4,2]{1,0} triangular-solve(%a, %b), left_side=true, lower=true, unit_diagonal=true, "
             "transpose_a=ADJOINT", "%a = f32[4,4]{1,0} parameter(0)", "%b = f32[4,2]{1,0} parameter(1)")
    o = t.attrs.triangular_solve_options
    assert (o.left_side, o.lower, o.unit_diagonal, o.transpose_a) == (True, True, True, 3)
    assert line("%c = f32[4,4]{1,0} cholesky(%a), lower=true", "%a = f32[4,4]{1,0} parameter(0)").attrs.cholesky_options.lower
    k = line("%k = (f32[2]{0}, s32[2]{0}) topk(%p), k=2, largest=false", P4)
    assert (k.attrs.k, k.attrs.largest) == (2, False)


def test_collectives():
    a = line("%a = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={{0,1},{2,3}}, "
             "use_global_device_ids=true, to_apply=%add", P4, comps=ADD)
    assert a.attrs.replica_groups == ((0, 1), (2, 3)) and a.attrs.channel_id == 1
    g = line("%g = f32[8]{0} all-gather(%p), replica_groups={}, dimensions={0}", P4)
    assert g.attrs.dimensions == (0,) and g.attrs.replica_groups == ()
    c = line("%c = f32[4]{0} collective-permute(%p), channel_id=2, source_target_pairs={{0,1},{1,0}}", P4)
    assert c.attrs.source_target_pairs == ((0, 1), (1, 0))


def test_iota_replica_groups_are_expanded():
    text = f"HloModule t\nENTRY %e {{\n  {P4}\n  ROOT %a = f32[4]{{0}} all-to-all(%p), replica_groups=[2,2]<=[2,2]T(1,0)\n}}\n"
    assert parse_module(text).entry.root.attrs.replica_groups == ((0, 2), (1, 3))


def test_common_attributes():
    i = line('%n = f32[4]{0} negate(%p), sharding={devices=[2]0,1}, frontend_attributes={a="1",b={k=1}}, '
             "control-predecessors={%c}, metadata={op_type=\"neg\" op_name=\"jit(f)/neg\" source_file=\"f.py\" "
             'source_line=3 stack_frame_id=2}, backend_config={"x":"}"}',
             P4, "%c = f32[] constant(1)")
    a = i.attrs
    assert a.sharding == "{devices=[2]0,1}" and a.frontend_attributes == (("a", "1"), ("b", "{k=1}"))
    assert [p.name for p in i.control_predecessors] == ["c"]
    assert i.metadata == OpMetadata(op_type="neg", op_name="jit(f)/neg", source_file="f.py", source_line=3,
                                    stack_frame_id=2)
    assert a.backend_config == '{"x":"}"}'


def test_metadata_escapes_are_c_style_octal_utf8():
    i = line('%n = f32[4]{0} negate(%p), metadata={op_name="a\\"b\\n\\303\\274"}', P4)
    assert i.metadata.op_name == 'a"b\nü'


def test_harmless_attributes_are_dropped_and_operand_shapes_accepted():
    text = ("HloModule t\nENTRY e {\n  p = f32[4] parameter(0), parameter_replication={false}, origin={{\"p\"}}\n"
            "  ROOT n = f32[4]{0} negate(f32[4]{0} p), statistics={visualizing_index=1,stat-1=33}\n}\n")
    root = parse_module(text).entry.root
    assert print_instruction(root) == "%n = f32[4]{0} negate(%p)"


# ---- module-level syntax ------------------------------------------------------------------
def test_module_header_and_schedule():
    text = """HloModule m, is_scheduled=true, input_output_alias={ {0}: (0, {}, must-alias), {1}: (1, {}, may-alias) }, buffer_donor={ (1, {}) }, entry_computation_layout={(f32[4]{0}, f32[4]{0})->(f32[4]{0}, f32[4]{0})}, replica_count=2, frontend_attributes={k="v"}

ENTRY %main (a: f32[4], b: f32[4]) -> (f32[4], f32[4]) {
  %b = f32[4]{0} parameter(1)
  %a = f32[4]{0} parameter(0)
  %n = f32[4]{0} negate(%a)
  ROOT %t = (f32[4]{0}, f32[4]{0}) tuple(%n, %b)
}

"""
    module = parse_module(text)
    assert module.schedule == {"main": ["b", "a", "n", "t"]}
    assert [(a.output_index, a.parameter_number, a.kind) for a in module.input_output_alias] == [((0,), 0, 2), ((1,), 1, 1)]
    assert [(d.parameter_number, d.parameter_index) for d in module.buffer_donors] == [(1, ())]
    assert module.config.replica_count == 2 and module.frontend_attributes == (("k", "v"),)
    assert [str(s) for s in module.config.entry_layout[0]] == ["f32[4]{0}", "f32[4]{0}"]
    assert print_module(module) == text


def test_short_form_comments_stack_frames_and_forward_references():
    text = """HloModule jit_f, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

FileNames
1 "f.py"

FunctionNames
1 "<module>"

FileLocations
1 {file_name_id=1 function_name_id=1 line=1 end_line=1 column=0 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}

ENTRY main.2 {
  // a line comment
  ROOT c.1 = f32[4]{0} call(a.1), to_apply=neg.1 /* defined below */
  a.1 = f32[4]{0} parameter(0), metadata={op_name="a" stack_frame_id=1}
}

neg.1 {
  n.1 = f32[4]{0} parameter(0)
  ROOT m.1 = f32[4]{0} negate(n.1)
}
"""
    module = parse_module(text)
    assert [c.name for c in module.computations] == ["neg.1", "main.2"]
    assert module.entry.name == "main.2" and module.entry.root.called[0].name == "neg.1"
    assert module.entry.parameter(0).metadata.stack_frame_id == 1
    printed = print_module(module)
    assert "%c.1 = f32[4]{0} call(%a.1), to_apply=%neg.1" in printed
    assert print_module(parse_module(printed)) == printed


def test_computation_and_instruction_names_live_in_separate_namespaces():
    text = "HloModule t\nsort.2 {\n  sort.2 = f32[] parameter(0)\n  ROOT n = f32[] negate(sort.2)\n}\n" \
           "ENTRY e {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=sort.2\n}\n"
    module = parse_module(text)
    assert module.computation("sort.2").parameter(0).name == "sort.2"


def test_ids_are_fresh_and_parameters_numbered_from_the_text():
    module = parse_module(f"HloModule t\nENTRY e {{\n  {Q4}\n  {P4}\n  ROOT a = f32[4]{{0}} add(%p, %q)\n}}\n")
    ids = [i.id for c in module.computations for i in c.instructions]
    assert len(set(ids)) == len(ids) and all(i > 0 for i in ids)
    assert [p.name for p in module.entry.parameters] == ["p", "q"]


def test_elided_constant_parses_without_a_literal():
    module = parse_module("HloModule t\nENTRY e {\n  ROOT c = f32[100]{0} constant({...})\n}\n")
    assert module.entry.root.opcode == Opcode.CONSTANT and module.entry.root.attrs.literal is None
    assert "constant({...})" in print_module(module)


def test_print_options():
    module = parse_module(f"HloModule t\nENTRY e {{\n  {P4}, metadata={{op_name=\"x\"}}\n  ROOT n = f32[4]{{0}} negate(%p)\n}}\n")
    assert "metadata" not in print_module(module, print_metadata=False)
    with_ids = print_module(module, print_ids=True)
    assert f"/*id={module.entry.root.id}*/" in with_ids
    assert print_module(parse_module(with_ids)) == print_module(module)


# ---- errors ------------------------------------------------------------------------------------
BASE = "HloModule m\nENTRY %e (p: f32[4]) -> f32[4] {\n  %p = f32[4]{0} parameter(0)\n  ROOT %n = f32[4]{0} negate(%p)\n}\n"
ERRORS = [
    (BASE.replace("negate(", "negat("), 4, 23, "unknown opcode 'negat'"),
    (BASE.replace("negate(%p)", "negate(%q)"), 4, 31, "'q' is not defined"),
    (BASE.replace("negate(%p)", "negate(%p), foo=1"), 4, 35, "unknown attribute 'foo'"),
    (BASE.replace("f32[4]{0} negate", "f32[4}{0} negate"), 4, 13, "expected a shape"),
    (BASE.rstrip().rstrip("}"), 5, 1, "missing its closing '}'"),
    (BASE.replace("negate(%p)", "negate(%p)\n  %c = f32[2]{0} constant({1, 2, 3})"), 5, 34, "too many elements"),
    (BASE.replace("parameter(0)", "parameter(x)"), 3, 28, "expected a parameter number"),
    (BASE.replace("ROOT %n", "%p = f32[4]{0} negate(%p)\n  ROOT %n"), 4, 4, "defined twice"),
    (BASE.replace("%p = f32[4]{0} parameter(0)", "ROOT %p = f32[4]{0} parameter(0)"), 4, 9, "more than one ROOT"),
    (BASE.replace("f32[4]{0} parameter", "f32[4]{1} parameter"), 3, 14, "not a permutation"),
    (BASE.replace("negate(%p)", "get-tuple-element(%p)"), 4, 9, "needs the attribute index="),
    (BASE.replace("negate(%p)", "call(%p), to_apply=%nope"), 4, 43, "computation 'nope' is not defined"),
    (BASE.replace("negate(%p)", 'negate(%p), metadata={op_name="abc}'), 4, 53, "expected a quoted string"),
    (BASE.replace("negate(%p)", "negate(%p) /* hi"), 4, 34, "unterminated /* comment"),
    (BASE.replace("negate(%p)", "negate(f32[5]{0} %p)"), 4, 41, "declared as f32[5]{0}"),
    (BASE.replace("negate(%p)", "negate(%p)\n  %c = f32[] constant(nan(0xfffffff))"), 5, 23, "NaN payload"),
    (BASE.replace("-> f32[4]", "-> f32[5]"), 2, 25, "returns f32[5]"),
    (BASE.replace("negate(%p)", "negate(%p), metadata={op_name=\"x\"}, metadata={}"), 4, 59, "appears twice"),
    (BASE.replace("negate(%p)", "negate(%p), is_host_transfer=true"), 4, 35, "not supported by hloc"),
    ("", 1, 1, "expected a computation"),
]


@pytest.mark.parametrize(("text", "lineno", "col", "fragment"), ERRORS)
def test_errors_name_the_line_and_column(text, lineno, col, fragment):
    with pytest.raises(ParseError) as info:
        parse_module(text, "bad.hlo")
    err = info.value
    assert fragment in str(err)
    assert (err.line, err.column) == (lineno, col)
    assert str(err).startswith(f"bad.hlo:{lineno}:{col}: ")


# ---- fuzzing --------------------------------------------------------------------------------
def _fuzz_corpus() -> list[str]:
    texts = [BASE, ADD.join(["HloModule t\n", f"ENTRY e {{\n  {P4}\n  ROOT r = f32[] reduce(%p, %s), "
                                               "dimensions={0}, to_apply=%add\n  %s = f32[] constant(0)\n}\n"])]
    for name in ("ops/constants.hlo", "ops/reduce_variadic.opt.hlo", "ops/select_and_scatter.opt.hlo"):
        if (SAMPLES / name).exists():
            texts.append((SAMPLES / name).read_text())
    return texts


CORPUS = _fuzz_corpus()
EDIT_CHARS = st.sampled_from(list("{}()[],=%:\"'/*-.x0123456789 \nabfnT"))


@settings(max_examples=int(__import__("os").environ.get("HLOC_FUZZ_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_text_parses_or_raises_parse_error(data):
    text = data.draw(st.sampled_from(CORPUS))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(text)))
        kind = data.draw(st.sampled_from(["delete", "insert", "replace"]))
        char = data.draw(EDIT_CHARS)
        end = pos + data.draw(st.integers(1, 3)) if kind != "insert" else pos
        text = text[:pos] + ("" if kind == "delete" else char) + text[end:]
    try:
        module = parse_module(text, "fuzz.hlo")
    except ParseError as e:
        assert "internal error" not in str(e), str(e)
        assert str(e).startswith("fuzz.hlo:")
        return
    printed = print_module(module)
    assert print_module(parse_module(printed)) == printed


def test_constant_dtype_is_kept():
    i = line("%c = bf16[2]{0} constant({1.5, -0})")
    assert i.shape.element_type == PrimitiveType.BF16 and i.attrs.literal.array.tolist() == [1.5, 0.0]


def test_dynamic_and_tiled_shapes():
    i = line("%n = f32[<=4,?]{1,0} negate(%d)", "%d = f32[<=4,?]{1,0} parameter(0)")
    assert i.shape.dynamic_dims == (True, True) and i.shape.dims[0] == 4
    t = line("%n = f32[8,128]{1,0:T(8,128)E(32)S(1)} negate(%d)", "%d = f32[8,128]{1,0:T(8,128)E(32)S(1)} parameter(0)")
    lay = t.shape.layout
    assert (lay.minor_to_major, lay.tiles[0].dims, lay.element_size_in_bits, lay.memory_space) == ((1, 0), (8, 128), 32, 1)
    x = line("%t = (f32[], (s32[2]{0}, token[])) tuple(%a, %b)", "%a = f32[] parameter(0)",
             "%b = (s32[2]{0}, token[]) parameter(1)")
    assert x.shape.tuple_shapes[1].tuple_shapes[1].is_token


def test_execution_thread_is_kept():
    text = NEG.replace("}\n", '}, execution_thread="host"\n', 1)
    module = parse_module(f"HloModule t\n\n{text}\nENTRY %e {{\n  {P4}\n  ROOT %c = f32[4]{{0}} call(%p), to_apply=%neg\n}}\n")
    assert module.computation("neg").execution_thread == "host"
    assert '}, execution_thread="host"' in print_module(module)


def test_cycles_are_rejected():
    text = "HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  a = f32[] add(p, b)\n  b = f32[] negate(a)\n  ROOT c = f32[] negate(b)\n}\n"
    with pytest.raises(ParseError, match="depends on itself") as info:
        parse_module(text)
    assert (info.value.line, info.value.column) == (4, 3)
