"""Shape rules of the remaining opcode families, each checked against numpy where numpy has the
operation (element types of complex ops, fft, linear algebra, sort/topk, bitcasts)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hloc.errors import VerifyError
from hloc.ir import Opcode, Shape, TriangularSolveOptions, dtypes
from hloc.ir.shape_inference import infer_shape, registered_opcodes

from .support.shapes import Builder, comparator, scalar_computation, sh

O = Opcode  # noqa: E741  (short alias, as in hloc.ir.opcodes)


def infer(opcode, result, operand_shapes, called=(), **attrs) -> Shape:
    b = Builder()
    params = [b.param(s) for s in operand_shapes]
    return infer_shape(b.op(opcode, result, *params, called=called, **attrs))


def np_shape(a: np.ndarray) -> Shape:
    return Shape.array(dtypes.from_numpy(a.dtype), a.shape)


def test_every_opcode_has_a_rule():
    assert set(Opcode) == set(registered_opcodes())


# ---- elementwise --------------------------------------------------------------------------------
@pytest.mark.parametrize("opcode,fn", [(O.ABS, np.abs), (O.REAL, np.real), (O.IMAG, np.imag),
                                       (O.NEGATE, np.negative), (O.EXP, np.exp)])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, np.float32])
def test_unary_result_types_follow_numpy(opcode, fn, dtype):
    x = np.ones((2, 3), dtype)
    expect = np_shape(np.asarray(fn(x)))
    assert infer(opcode, expect, [np_shape(x)]).compatible(expect)


def test_complex_and_atan2_follow_numpy():
    for dtype in (np.float32, np.float64):
        x = np.ones((4,), dtype)
        expect = np_shape(x + 1j * x)
        assert infer(O.COMPLEX, expect, [np_shape(x), np_shape(x)]).compatible(expect)
        expect = np_shape(np.arctan2(x, x))
        assert infer(O.ATAN2, expect, [np_shape(x), np_shape(x)]).compatible(expect)


@pytest.mark.parametrize("opcode,shape,fragment", [
    (O.FLOOR, "s32[2]", "floating-point, got s32"),
    (O.NOT, "f32[2]", "pred or integral, got f32"),
    (O.CLZ, "f32[2]", "integral, got f32"),
    (O.IS_FINITE, "s32[2]", "floating-point, got s32"),
])
def test_unary_type_rules(opcode, shape, fragment):
    with pytest.raises(VerifyError, match=fragment):
        infer(opcode, shape, [shape])


def test_binary_ops_need_identical_operands():
    assert infer(O.ADD, "f32[2,3]", ["f32[2,3]", "f32[2,3]"]).compatible(sh("f32[2,3]"))
    with pytest.raises(VerifyError, match="no implicit broadcast"):
        infer(O.ADD, "f32[2,3]", ["f32[2,3]", "f32[]"])
    with pytest.raises(VerifyError, match="same element type"):
        infer(O.MULTIPLY, "f32[2]", ["f32[2]", "bf16[2]"])
    with pytest.raises(VerifyError, match="arithmetic type, got pred"):
        infer(O.SUBTRACT, "pred[2]", ["pred[2]", "pred[2]"])


def test_compare_returns_pred():
    a = np.zeros((3, 1), np.int8)
    expect = np_shape(a < a)
    assert infer(O.COMPARE, expect, ["s8[3,1]", "s8[3,1]"], comparison_direction="LT") == \
        expect.without_layout()
    with pytest.raises(VerifyError, match="unknown comparison direction XX"):
        infer(O.COMPARE, expect, ["s8[3,1]", "s8[3,1]"], comparison_direction="XX")


def test_select_pred_must_match_dims():
    assert infer(O.SELECT, "f32[2]", ["pred[2]", "f32[2]", "f32[2]"]).dims == (2,)
    with pytest.raises(VerifyError, match="predicate dimensions must match"):
        infer(O.SELECT, "f32[2]", ["pred[]", "f32[2]", "f32[2]"])
    with pytest.raises(VerifyError, match="element type pred"):
        infer(O.SELECT, "f32[2]", ["s32[2]", "f32[2]", "f32[2]"])


def test_clamp_allows_scalar_bounds():
    x = np.zeros((2, 3), np.float32)
    expect = np_shape(np.clip(x, np.float32(0), np.float32(1)))
    assert infer(O.CLAMP, expect, ["f32[]", "f32[2,3]", "f32[]"]).compatible(expect)
    with pytest.raises(VerifyError, match="min must be a scalar or have the operand's"):
        infer(O.CLAMP, "f32[2,3]", ["f32[3]", "f32[2,3]", "f32[]"])


# ---- type changes -------------------------------------------------------------------------------
@pytest.mark.parametrize("src,dst", [(np.float32, np.uint8), (np.uint8, np.float32),
                                     (np.float64, np.int32), (np.int16, ml_dtypes.bfloat16),
                                     (np.complex64, np.complex64), (np.float32, np.int32)])
def test_bitcast_convert_matches_numpy_view(src, dst):
    x = np.zeros((3, 4), src)
    y = x.view(dst)  # numpy views the last axis; XLA adds/removes a minor dimension instead
    ratio = np.dtype(src).itemsize / np.dtype(dst).itemsize
    if ratio > 1:
        y = y.reshape(3, 4, int(ratio))
    elif ratio < 1:
        x = np.zeros((3, int(1 / ratio)), src)
        y = x.view(dst).reshape(3)
    expect = np_shape(y)
    assert infer(O.BITCAST_CONVERT, expect, [np_shape(x)]).compatible(expect)


def test_bitcast_convert_rejects_complex_to_real_and_bad_minor_dim():
    with pytest.raises(VerifyError, match="complex and real"):
        infer(O.BITCAST_CONVERT, "f32[2,2]", ["c64[2]"])
    with pytest.raises(VerifyError, match="minor dimension of size 4"):
        infer(O.BITCAST_CONVERT, "f32[3]", ["u8[3,2]"])


def test_convert_and_reduce_precision():
    assert infer(O.CONVERT, "bf16[2,3]", ["s32[2,3]"]).compatible(sh("bf16[2,3]"))
    assert infer(O.REDUCE_PRECISION, "f32[2]", ["f32[2]"], exponent_bits=8,
                 mantissa_bits=7).dims == (2,)
    with pytest.raises(VerifyError, match="exponent_bits >= 1"):
        infer(O.REDUCE_PRECISION, "f32[2]", ["f32[2]"], exponent_bits=0, mantissa_bits=7)


# ---- fft and linear algebra ---------------------------------------------------------------------
@pytest.mark.parametrize("fft_type,length,make", [
    (0, (4,), lambda x: np.fft.fftn(x.astype(np.complex64), axes=(-1,)).astype(np.complex64)),
    (1, (3, 4), lambda x: np.fft.ifftn(x.astype(np.complex64), axes=(-2, -1)).astype(np.complex64)),
    (2, (3, 4), lambda x: np.fft.rfftn(x, axes=(-2, -1)).astype(np.complex64)),
    (2, (4,), lambda x: np.fft.rfftn(x, axes=(-1,)).astype(np.complex64)),
])
def test_fft_matches_numpy(fft_type, length, make):
    x = np.zeros((2, 3, 4), np.float32)
    expect = np_shape(make(x))
    operand = np_shape(x.astype(np.complex64)) if fft_type in (0, 1) else np_shape(x)
    assert infer(O.FFT, expect, [operand], fft_type=fft_type, fft_length=length).compatible(expect)


def test_irfft_matches_numpy():
    x = np.zeros((2, 3, 3), np.complex64)
    expect = np_shape(np.fft.irfftn(x, s=(3, 4), axes=(-2, -1)).astype(np.float32))
    got = infer(O.FFT, expect, [np_shape(x)], fft_type=3, fft_length=(3, 4))
    assert got.compatible(expect)
    with pytest.raises(VerifyError, match="IRFFT"):
        infer(O.FFT, expect, ["c64[2,3,4]"], fft_type=3, fft_length=(3, 4))


def test_triangular_solve_and_cholesky_match_numpy():
    a = np.eye(3, dtype=np.float32)[None].repeat(2, 0)
    b = np.ones((2, 3, 5), np.float32)
    expect = np_shape(np.linalg.solve(a, b).astype(np.float32))
    opts = TriangularSolveOptions(left_side=True, lower=True, transpose_a=1)
    got = infer(O.TRIANGULAR_SOLVE, expect, [np_shape(a), np_shape(b)],
                triangular_solve_options=opts)
    assert got.compatible(expect)
    with pytest.raises(VerifyError, match="shared dimension"):
        infer(O.TRIANGULAR_SOLVE, expect, [np_shape(a), np_shape(b)],
              triangular_solve_options=TriangularSolveOptions(left_side=False, transpose_a=1))
    expect = np_shape(np.linalg.cholesky(a))
    assert infer(O.CHOLESKY, expect, [np_shape(a)]).compatible(expect)
    with pytest.raises(VerifyError, match="square matrices"):
        infer(O.CHOLESKY, "f32[2,3]", ["f32[2,3]"])


# ---- sort / topk --------------------------------------------------------------------------------
def test_sort_variadic_returns_tuple_like_numpy():
    keys = np.zeros((3, 4), np.float32)
    vals = np.zeros((3, 4), np.int32)
    order = np.argsort(keys, axis=1)
    expect = Shape.tuple_of([np_shape(np.take_along_axis(keys, order, 1)),
                             np_shape(np.take_along_axis(vals, order, 1))])
    cmp = comparator("cmp", ["f32", "s32"])
    got = infer(O.SORT, expect, [np_shape(keys), np_shape(vals)], called=(cmp,), dimensions=(1,))
    assert got.compatible(expect)
    with pytest.raises(VerifyError, match="comparator computation cmp must take 2 parameter"):
        infer(O.SORT, "f32[3,4]", ["f32[3,4]"], called=(cmp,), dimensions=(1,))


def test_topk_matches_numpy():
    x = np.zeros((5, 7), np.float32)
    idx = np.argsort(-x, axis=-1)[..., :3].astype(np.int32)
    expect = Shape.tuple_of([np_shape(np.take_along_axis(x, idx, -1)), np_shape(idx)])
    assert infer(O.TOPK, expect, [np_shape(x)], k=3, largest=True).compatible(expect)
    with pytest.raises(VerifyError, match="k=8"):
        infer(O.TOPK, expect, [np_shape(x)], k=8)


# ---- dynamic slicing ----------------------------------------------------------------------------
def test_dynamic_slice_and_update_slice():
    x = np.zeros((5, 6), np.float32)
    expect = np_shape(x[1:4, 2:4])
    got = infer(O.DYNAMIC_SLICE, expect, ["f32[5,6]", "s32[]", "s32[]"], dynamic_slice_sizes=(3, 2))
    assert got.compatible(expect)
    with pytest.raises(VerifyError, match="one start index per operand dimension"):
        infer(O.DYNAMIC_SLICE, expect, ["f32[5,6]", "s32[]"], dynamic_slice_sizes=(3, 2))
    with pytest.raises(VerifyError, match="slice size 7"):
        infer(O.DYNAMIC_SLICE, expect, ["f32[5,6]", "s32[]", "s32[]"], dynamic_slice_sizes=(3, 7))
    got = infer(O.DYNAMIC_UPDATE_SLICE, "f32[5,6]", ["f32[5,6]", "f32[3,2]", "s64[]", "s64[]"])
    assert got.dims == (5, 6)
    with pytest.raises(VerifyError, match="update dimension 1 has size 7"):
        infer(O.DYNAMIC_UPDATE_SLICE, "f32[5,6]", ["f32[5,6]", "f32[3,7]", "s32[]", "s32[]"])


# ---- random numbers -----------------------------------------------------------------------------
def test_rng_ops():
    assert infer(O.RNG, "f32[4]", ["f32[]", "f32[]"], distribution=1).dims == (4,)
    with pytest.raises(VerifyError, match="normal distribution"):
        infer(O.RNG, "s32[4]", ["s32[]", "s32[]"], distribution=2)
    got = infer(O.RNG_BIT_GENERATOR, "(u64[2], u32[3,4])", ["u64[2]"], rng_algorithm=1)
    assert got.compatible(sh("(u64[2], u32[3,4])"))
    b = Builder()
    state = b.param("u64[2]")
    rbg = b.op(O.RNG_BIT_GENERATOR, "(u64[3], u32[3,4])", state)
    assert not infer_shape(rbg).compatible(rbg.shape)  # the state shape must carry through


# ---- tuples, tokens, calls, collectives ---------------------------------------------------------
def test_tuple_get_tuple_element_and_tokens():
    got = infer(O.TUPLE, "(f32[2], (s32[], pred[3]))", ["f32[2]", "(s32[], pred[3])"])
    assert got.compatible(sh("(f32[2], (s32[], pred[3]))"))
    assert infer(O.GET_TUPLE_ELEMENT, "pred[3]", ["(f32[2], pred[3])"], tuple_index=1) \
        .compatible(sh("pred[3]"))
    assert infer(O.AFTER_ALL, "token[]", ["token[]", "token[]"]).is_token
    with pytest.raises(VerifyError, match="operand 1 must be a token"):
        infer(O.AFTER_ALL, "token[]", ["token[]", "f32[]"])
    assert infer(O.OPT_BARRIER, "(f32[2], s32[])", ["(f32[2], s32[])"]).compatible(
        sh("(f32[2], s32[])"))


def test_custom_call_trusts_declared_shape_but_checks_aliasing():
    from hloc.ir import OutputOperandAliasing
    got = infer(O.CUSTOM_CALL, "(f32[3,3], s32[3])", ["f32[3,3]"], custom_call_target="x")
    assert got.compatible(sh("(f32[3,3], s32[3])"))
    alias = (OutputOperandAliasing((0,), 0, ()),)
    assert infer(O.CUSTOM_CALL, "(f32[3,3], s32[3])", ["f32[3,3]"],
                 output_operand_aliasing=alias).is_tuple
    bad = (OutputOperandAliasing((1,), 0, ()),)
    with pytest.raises(VerifyError, match="aliased output"):
        infer(O.CUSTOM_CALL, "(f32[3,3], s32[3])", ["f32[3,3]"], output_operand_aliasing=bad)


def test_called_computation_result_is_the_call_result():
    add = scalar_computation("add", O.ADD)
    assert infer(O.CALL, "f32[]", ["f32[]", "f32[]"], called=(add,)).compatible(sh("f32[]"))
    assert infer(O.MAP, "f32[4]", ["f32[4]", "f32[4]"], called=(add,)).compatible(sh("f32[4]"))
    with pytest.raises(VerifyError, match="called computation add parameter 1 has shape f32"):
        infer(O.CALL, "f32[]", ["f32[]", "s32[]"], called=(add,))


@pytest.mark.parametrize("opcode,result,operands,attrs,expect", [
    (O.ALL_REDUCE, "f32[4]", ["f32[4]"], {}, "f32[4]"),
    (O.ALL_REDUCE, "(f32[4], s32[])", ["f32[4]", "s32[]"], {}, "(f32[4], s32[])"),
    (O.ALL_GATHER, "f32[8,3]", ["f32[2,3]"], {"dimensions": (0,), "replica_groups": ((0, 1, 2, 3),)},
     "f32[8,3]"),
    (O.ALL_GATHER, "f32[2,9]", ["f32[2,3]"], {"dimensions": (1,)}, "f32[2,9]"),
    (O.REDUCE_SCATTER, "f32[2,3]", ["f32[8,3]"], {"dimensions": (0,),
                                                 "replica_groups": ((0, 1, 2, 3),)}, "f32[2,3]"),
    (O.ALL_TO_ALL, "f32[4,4]", ["f32[4,4]"], {"dimensions": (0,)}, "f32[4,4]"),
    (O.COLLECTIVE_PERMUTE, "f32[5]", ["f32[5]"], {"source_target_pairs": ((0, 1),)}, "f32[5]"),
    (O.COPY_START, "(f32[5], f32[5], u32[])", ["f32[5]"], {}, "(f32[5], f32[5], u32[])"),
    (O.COPY_DONE, "f32[5]", ["(f32[5], f32[5], u32[])"], {}, "f32[5]"),
    (O.REPLICA_ID, "u32[]", [], {}, "u32[]"),
    (O.SEND, "(f32[2], u32[], token[])", ["f32[2]", "token[]"], {}, "(f32[2], u32[], token[])"),
    (O.RECV_DONE, "(f32[2], token[])", ["(f32[2], u32[], token[])"], {}, "(f32[2], token[])"),
])
def test_collectives_and_async_pairs(opcode, result, operands, attrs, expect):
    called = (scalar_computation("sum", O.ADD),) if opcode in (O.ALL_REDUCE, O.REDUCE_SCATTER) \
        else ()
    assert infer(opcode, result, operands, called=called, **attrs).compatible(sh(expect))


def test_reduce_scatter_needs_divisible_dimension():
    with pytest.raises(VerifyError, match="not divisible by 4 shards"):
        infer(O.REDUCE_SCATTER, "f32[2,3]", ["f32[6,3]"], called=(scalar_computation("s", O.ADD),),
              dimensions=(0,), replica_groups=((0, 1, 2, 3),))
