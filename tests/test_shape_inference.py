"""Shape inference vs numpy: hypothesis draws operands and attributes, numpy computes the
result of the same operation, and the inferred shape must equal numpy's result shape."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hloc.errors import VerifyError
from hloc.ir import (
    DotDimensionNumbers,
    Opcode,
    PaddingDim,
    Shape,
    SliceDim,
)
from hloc.ir.shape_inference import infer_shape

from .support.shapes import Builder, numpy_pad, scalar_computation

O = Opcode  # noqa: E741  (short alias, as in hloc.ir.opcodes)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
dims_st = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)
pos_dims_st = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


def infer(opcode, result, operand_shapes, called=(), **attrs) -> Shape:
    b = Builder()
    params = [b.param(s) for s in operand_shapes]
    return infer_shape(b.op(opcode, result, *params, called=called, **attrs))


def f32(dims) -> Shape:
    return Shape.array("f32", dims)


def assert_dims(shape: Shape, arr: np.ndarray, et: str = "f32") -> None:
    assert shape.dims == arr.shape
    assert shape.dtype.name == et


# ---- index-remapping ops ------------------------------------------------------------------------
@SETTINGS
@given(st.data())
def test_broadcast_matches_numpy(data):
    out = data.draw(pos_dims_st)
    kept = sorted(data.draw(st.sets(st.integers(0, len(out) - 1))))
    x = np.zeros([out[d] for d in kept], np.float32)
    # numpy: give the operand size-1 axes where the broadcast adds dimensions, then broadcast.
    expanded = x.reshape([out[d] if d in kept else 1 for d in range(len(out))])
    expect = np.broadcast_to(expanded, out)
    got = infer(O.BROADCAST, f32(out), [f32(x.shape)], dimensions=tuple(kept))
    assert_dims(got, expect)


def test_broadcast_rejects_size_mismatch():
    with pytest.raises(VerifyError, match="operand dimension 0 has size 3 but result dimension 1"):
        infer(O.BROADCAST, f32((2, 4)), [f32((3,))], dimensions=(1,))


@st.composite
def reshapes(draw):
    """A shape and a regrouping of its prime factors (and some 1s) into another shape."""
    dims = draw(pos_dims_st)
    factors = [p for n in dims for p in _prime_factors(n)] + [1] * draw(st.integers(0, 2))
    factors = draw(st.permutations(factors))
    cuts = sorted(draw(st.sets(st.integers(1, max(len(factors) - 1, 1)))))
    bounds = [0] + [c for c in cuts if c < len(factors)] + [len(factors)]
    new = [int(np.prod(factors[a:b])) for a, b in zip(bounds, bounds[1:], strict=False)]
    return dims, tuple(new)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@SETTINGS
@given(reshapes())
def test_reshape_matches_numpy(case):
    dims, new = case
    x = np.zeros(dims, np.float32)
    expect = x.reshape(new)
    assert_dims(infer(O.RESHAPE, f32(new), [f32(dims)]), expect)
    with pytest.raises(VerifyError, match="element counts differ"):
        infer(O.RESHAPE, f32((x.size + 1,)), [f32(dims)])


@SETTINGS
@given(dims_st, st.randoms(use_true_random=False))
def test_transpose_matches_numpy(dims, rnd):
    perm = list(range(len(dims)))
    rnd.shuffle(perm)
    expect = np.transpose(np.zeros(dims, np.float32), perm)
    assert_dims(infer(O.TRANSPOSE, f32(expect.shape), [f32(dims)], dimensions=tuple(perm)), expect)


@st.composite
def slices(draw):
    dims = draw(dims_st)
    out = []
    for n in dims:
        start = draw(st.integers(0, n))
        limit = draw(st.integers(start, n))
        out.append(SliceDim(start, limit, draw(st.integers(1, 3))))
    return dims, tuple(out)


@SETTINGS
@given(slices())
def test_slice_matches_numpy(case):
    dims, sl = case
    x = np.zeros(dims, np.float32)
    expect = x[tuple(slice(s.start, s.limit, s.stride) for s in sl)]
    assert_dims(infer(O.SLICE, f32(expect.shape), [f32(dims)], slice=sl), expect)


def test_slice_rejects_limit_past_end():
    with pytest.raises(VerifyError, match=r"slice \[0:5\] is outside \[0:4\]"):
        infer(O.SLICE, f32((5,)), [f32((4,))], slice=(SliceDim(0, 5),))


@SETTINGS
@given(pos_dims_st, st.data())
def test_concatenate_matches_numpy(dims, data):
    axis = data.draw(st.integers(0, len(dims) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    parts = [np.zeros(dims[:axis] + (n,) + dims[axis + 1:], np.float32) for n in sizes]
    expect = np.concatenate(parts, axis)
    got = infer(O.CONCATENATE, f32(expect.shape), [f32(p.shape) for p in parts], dimensions=(axis,))
    assert_dims(got, expect)


@st.composite
def pads(draw):
    dims = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple))
    cfg = tuple(PaddingDim(draw(st.integers(-2, 3)), draw(st.integers(-2, 3)),
                           draw(st.integers(0, 2))) for _ in dims)
    return dims, cfg


@SETTINGS
@given(pads())
def test_pad_matches_numpy(case):
    dims, cfg = case
    x = np.zeros(dims, np.float32)
    sizes = [n + p.low + p.high + max(n - 1, 0) * p.interior for n, p in zip(dims, cfg, strict=True)]
    if min(sizes) < 0:
        with pytest.raises(VerifyError, match="makes size"):
            infer(O.PAD, f32((0,) * len(dims)), [f32(dims), "f32[]"], padding=cfg)
        return
    expect = numpy_pad(x, cfg)
    assert_dims(infer(O.PAD, f32(expect.shape), [f32(dims), "f32[]"], padding=cfg), expect)


@SETTINGS
@given(dims_st, st.data())
def test_reverse_matches_numpy(dims, data):
    axes = sorted(data.draw(st.sets(st.integers(0, max(len(dims) - 1, 0)))) if dims else [])
    expect = np.flip(np.zeros(dims, np.float32), axes)
    assert_dims(infer(O.REVERSE, f32(dims), [f32(dims)], dimensions=tuple(axes)), expect)


@SETTINGS
@given(pos_dims_st, st.data())
def test_iota_matches_numpy(dims, data):
    d = data.draw(st.integers(0, len(dims) - 1))
    shape = [1] * len(dims)
    shape[d] = dims[d]
    expect = np.broadcast_to(np.arange(dims[d], dtype=np.int32).reshape(shape), dims)
    got = infer(O.IOTA, Shape.array("s32", dims), [], dimensions=(d,))
    assert_dims(got, expect, "s32")
    with pytest.raises(VerifyError, match="iota dimension"):
        infer(O.IOTA, Shape.array("s32", dims), [], dimensions=(len(dims),))


# ---- contractions -------------------------------------------------------------------------------
@st.composite
def dots(draw):
    letters = iter("abcdefgh")
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    contract = draw(st.lists(st.integers(1, 3), max_size=2))
    lfree = draw(st.lists(st.integers(1, 3), max_size=2))
    rfree = draw(st.lists(st.integers(1, 3), max_size=2))
    named = {kind: [(next(letters), n) for n in sizes] for kind, sizes in
             (("b", batch), ("c", contract), ("l", lfree), ("r", rfree))}
    lhs = named["b"] + named["c"] + named["l"]
    rhs = named["b"] + named["c"] + named["r"]
    lhs = draw(st.permutations(lhs))
    rhs = draw(st.permutations(rhs))
    return named, lhs, rhs


@SETTINGS
@given(dots())
def test_dot_matches_einsum(case):
    named, lhs, rhs = case
    lpos = {c: i for i, (c, _) in enumerate(lhs)}
    rpos = {c: i for i, (c, _) in enumerate(rhs)}
    dn = DotDimensionNumbers(tuple(lpos[c] for c, _ in named["c"]),
                             tuple(rpos[c] for c, _ in named["c"]),
                             tuple(lpos[c] for c, _ in named["b"]),
                             tuple(rpos[c] for c, _ in named["b"]))
    # XLA's order: batch dims, then lhs free dims, then rhs free dims (each in operand order).
    out = ("".join(c for c, _ in named["b"]) + "".join(c for c, _ in lhs if c in dict(named["l"]))
           + "".join(c for c, _ in rhs if c in dict(named["r"])))
    a = np.ones([n for _, n in lhs], np.float32)
    b = np.ones([n for _, n in rhs], np.float32)
    expect = np.einsum(f"{''.join(c for c, _ in lhs)},{''.join(c for c, _ in rhs)}->{out}", a, b)
    got = infer(O.DOT, f32(expect.shape), [f32(a.shape), f32(b.shape)], dot_dnums=dn)
    assert_dims(got, expect)


def test_dot_contracting_mismatch_message():
    dn = DotDimensionNumbers((1,), (0,))
    with pytest.raises(VerifyError, match="dot: lhs contracting dimension 1 has size 3 but rhs "
                                          "contracting dimension 0 has size 4"):
        infer(O.DOT, f32((2, 5)), [f32((2, 3)), f32((4, 5))], dot_dnums=dn)


def test_dot_result_type_is_the_declared_preferred_type():
    dn = DotDimensionNumbers((1,), (0,))
    got = infer(O.DOT, Shape.array("f32", (2, 5)), ["bf16[2,3]", "bf16[3,5]"], dot_dnums=dn)
    assert got.dtype.name == "f32"
    with pytest.raises(VerifyError, match="narrower"):
        infer(O.DOT, Shape.array("s8", (2, 5)), ["s32[2,3]", "s32[3,5]"], dot_dnums=dn)


# ---- reductions ---------------------------------------------------------------------------------
@SETTINGS
@given(dims_st, st.data())
def test_reduce_matches_numpy(dims, data):
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(dims) - 1)))) if dims else ())
    expect = np.sum(np.zeros(dims, np.float32), axis=axes)
    add = scalar_computation("add", O.ADD)
    got = infer(O.REDUCE, f32(expect.shape), [f32(dims), "f32[]"], called=(add,), dimensions=axes)
    assert_dims(got, expect)


def test_variadic_reduce_is_a_tuple_of_reducer_results():
    b = Builder("argmax")
    p = [b.param(s) for s in ("f32[]", "s32[]", "f32[]", "s32[]")]
    mx = b.op(O.MAXIMUM, "f32[]", p[0], p[2])
    mn = b.op(O.MINIMUM, "s32[]", p[1], p[3])
    b.op(O.TUPLE, "(f32[], s32[])", mx, mn)
    got = infer(O.REDUCE, "(f32[3], s32[3])", ["f32[3,4]", "s32[3,4]", "f32[]", "s32[]"],
                called=(b.comp,), dimensions=(1,))
    assert got.compatible(Shape.tuple_of([f32((3,)), Shape.array("s32", (3,))]))
