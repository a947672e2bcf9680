"""Windowed and indexed ops vs numpy: convolution, reduce-window, select-and-scatter, gather,
scatter. Output sizes come from brute-force enumeration of window positions over a numpy-padded
and dilated input, and from a naive numpy gather."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hloc.errors import VerifyError
from hloc.ir import (
    ConvDimensionNumbers,
    GatherDimensionNumbers,
    Opcode,
    PaddingDim,
    ScatterDimensionNumbers,
    Shape,
    Window,
    WindowDimension,
)
from hloc.ir.shape_inference import infer_shape

from .support.shapes import Builder, numpy_pad, scalar_computation

O = Opcode  # noqa: E741  (short alias, as in hloc.ir.opcodes)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def infer(opcode, result, operand_shapes, called=(), **attrs) -> Shape:
    b = Builder()
    params = [b.param(s) for s in operand_shapes]
    return infer_shape(b.op(opcode, result, *params, called=called, **attrs))


def f32(dims) -> Shape:
    return Shape.array("f32", dims)


def window_positions(n: int, w: WindowDimension) -> int:
    """Count window placements by materialising the dilated, padded base with numpy."""
    base = numpy_pad(np.ones(n), [PaddingDim(w.padding_low, w.padding_high, w.base_dilation - 1)])
    span = (w.size - 1) * w.window_dilation + 1
    return len(range(0, base.shape[0] - span + 1, w.stride))


@st.composite
def window_dims(draw, n: int, size: int | None = None):
    return WindowDimension(
        size=size if size is not None else draw(st.integers(1, 3)),
        stride=draw(st.integers(1, 3)),
        padding_low=draw(st.integers(-1, 2)), padding_high=draw(st.integers(-1, 2)),
        window_dilation=draw(st.integers(1, 2)), base_dilation=draw(st.integers(1, 2)))


def _valid_padding(n: int, w: WindowDimension) -> bool:
    dilated = (n - 1) * w.base_dilation + 1 if n else 0
    return w.padding_low + dilated + w.padding_high >= 0 and min(w.padding_low, w.padding_high) >= -dilated


@st.composite
def convs(draw):
    nsp = draw(st.integers(1, 2))
    rank = nsp + 2
    in_perm, k_perm, out_perm = (draw(st.permutations(range(rank))) for _ in range(3))
    groups = draw(st.sampled_from([(1, 1), (2, 1), (1, 2)]))
    fgc, bgc = groups
    batch, kin, kout = draw(st.integers(1, 2)) * bgc, draw(st.integers(1, 2)), draw(st.integers(1, 2)) * fgc * bgc
    spatial = [draw(st.integers(1, 5)) for _ in range(nsp)]
    ksizes = [draw(st.integers(1, 3)) for _ in range(nsp)]
    wins = [draw(window_dims(n, k)) for n, k in zip(spatial, ksizes, strict=True)]
    dn = ConvDimensionNumbers(in_perm[0], in_perm[1], tuple(in_perm[2:]), k_perm[0], k_perm[1],
                              tuple(k_perm[2:]), out_perm[0], out_perm[1], tuple(out_perm[2:]))
    lhs = [0] * rank
    lhs[dn.input_batch_dimension], lhs[dn.input_feature_dimension] = batch, kin * fgc
    rhs = [0] * rank
    rhs[dn.kernel_input_feature_dimension], rhs[dn.kernel_output_feature_dimension] = kin, kout
    for i in range(nsp):
        lhs[dn.input_spatial_dimensions[i]] = spatial[i]
        rhs[dn.kernel_spatial_dimensions[i]] = ksizes[i]
    return dn, lhs, rhs, Window(tuple(wins)), fgc, bgc


@SETTINGS
@given(convs())
def test_convolution_output_size_matches_brute_force(case):
    dn, lhs, rhs, window, fgc, bgc = case
    expect = [0] * len(lhs)
    expect[dn.output_batch_dimension] = lhs[dn.input_batch_dimension] // bgc
    expect[dn.output_feature_dimension] = rhs[dn.kernel_output_feature_dimension]
    for i, w in enumerate(window.dims):
        expect[dn.output_spatial_dimensions[i]] = window_positions(lhs[dn.input_spatial_dimensions[i]], w)
    got = infer(O.CONVOLUTION, f32(expect), [f32(lhs), f32(rhs)], conv_dnums=dn, window=window,
                feature_group_count=fgc, batch_group_count=bgc)
    assert got.dims == tuple(expect)


def test_convolution_1d_matches_numpy_correlate():
    x, w = np.arange(7.0), np.ones(3)
    dn = ConvDimensionNumbers(0, 1, (2,), 1, 0, (2,), 0, 1, (2,))
    window = Window((WindowDimension(3),))
    got = infer(O.CONVOLUTION, f32((1, 1, 5)), [f32((1, 1, 7)), f32((1, 1, 3))], conv_dnums=dn,
                window=window)
    assert got.dims[2] == np.correlate(x, w, "valid").shape[0]


def test_convolution_feature_group_mismatch():
    dn = ConvDimensionNumbers(0, 1, (2,), 1, 0, (2,), 0, 1, (2,))
    with pytest.raises(VerifyError, match="input features 4 / feature_group_count 2"):
        infer(O.CONVOLUTION, f32((1, 2, 5)), [f32((1, 4, 7)), f32((2, 3, 3))], conv_dnums=dn,
              window=Window((WindowDimension(3),)), feature_group_count=2)


@st.composite
def reduce_windows(draw):
    dims = draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
    wins = tuple(draw(window_dims(n)) for n in dims)
    return dims, Window(wins)


@SETTINGS
@given(reduce_windows())
def test_reduce_window_matches_brute_force(case):
    dims, window = case
    if not all(_valid_padding(n, w) for n, w in zip(dims, window.dims, strict=True)):
        return
    expect = [window_positions(n, w) for n, w in zip(dims, window.dims, strict=True)]
    add = scalar_computation("add", O.ADD)
    got = infer(O.REDUCE_WINDOW, f32(expect), [f32(dims), "f32[]"], called=(add,), window=window)
    assert got.dims == tuple(expect)


def test_reduce_window_matches_numpy_sliding_window():
    x = np.zeros((6, 5), np.float32)
    view = np.lib.stride_tricks.sliding_window_view(x, (3, 2))[::2, ::1]
    window = Window((WindowDimension(3, 2), WindowDimension(2, 1)))
    add = scalar_computation("add", O.ADD)
    got = infer(O.REDUCE_WINDOW, f32(view.shape[:2]), [f32(x.shape), "f32[]"], called=(add,),
                window=window)
    assert got.dims == view.shape[:2]


def test_select_and_scatter_source_must_match_windowed_operand():
    b = Builder("ge")
    p0, p1 = b.param("f32[]"), b.param("f32[]")
    b.op(O.COMPARE, "pred[]", p0, p1, comparison_direction="GE")
    add = scalar_computation("add", O.ADD)
    window = Window((WindowDimension(2, 2), WindowDimension(2, 2)))
    got = infer(O.SELECT_AND_SCATTER, "f32[4,6]", ["f32[4,6]", "f32[2,3]", "f32[]"],
                called=(b.comp, add), window=window)
    assert got.dims == (4, 6)
    with pytest.raises(VerifyError, match="source f32\\[2,2\\] must have the windowed"):
        infer(O.SELECT_AND_SCATTER, "f32[4,6]", ["f32[4,6]", "f32[2,2]", "f32[]"],
              called=(b.comp, add), window=window)


# ---- gather / scatter ---------------------------------------------------------------------------
def naive_gather(x, idx, dn: GatherDimensionNumbers, sizes) -> np.ndarray:
    """XLA gather (no batching dims) written the slow, obvious way."""
    if dn.index_vector_dim == idx.ndim:
        idx = idx[..., None]
    idx = np.moveaxis(idx, dn.index_vector_dim, -1)
    batch_shape = idx.shape[:-1]
    pieces = []
    for b in np.ndindex(*batch_shape):
        start = [0] * x.ndim
        for k, d in enumerate(dn.start_index_map):
            start[d] = int(np.clip(idx[b][k], 0, x.shape[d] - sizes[d]))
        piece = x[tuple(slice(s, s + n) for s, n in zip(start, sizes, strict=True))]
        pieces.append(piece.reshape([n for d, n in enumerate(sizes) if d not in dn.collapsed_slice_dims]))
    offset_shape = [n for d, n in enumerate(sizes) if d not in dn.collapsed_slice_dims]
    out = np.stack(pieces).reshape(batch_shape + tuple(offset_shape))
    return np.moveaxis(out, range(len(batch_shape), out.ndim), dn.offset_dims)


@st.composite
def gathers(draw):
    xdims = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    rank = len(xdims)
    index_map = draw(st.permutations(range(rank)).flatmap(
        lambda p: st.integers(0, rank).map(lambda k: tuple(p[:k]))))
    collapsed = tuple(sorted(draw(st.sets(st.sampled_from(range(rank))))))
    sizes = tuple(1 if d in collapsed else draw(st.integers(0, xdims[d])) for d in range(rank))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    ivd = draw(st.integers(0, len(batch)))
    implicit = len(index_map) == 1 and ivd == len(batch) and draw(st.booleans())
    idx_dims = list(batch) if implicit else batch[:ivd] + [len(index_map)] + batch[ivd:]
    out_rank = rank - len(collapsed) + len(batch)
    offset_dims = tuple(sorted(draw(st.permutations(range(out_rank)))[:rank - len(collapsed)]))
    dn = GatherDimensionNumbers(offset_dims, collapsed, index_map, ivd)
    return np.arange(np.prod(xdims)).reshape(xdims), np.zeros(idx_dims, np.int32), dn, sizes


@SETTINGS
@given(gathers())
def test_gather_matches_naive_numpy(case):
    x, idx, dn, sizes = case
    expect = naive_gather(x, idx, dn, sizes)
    got = infer(O.GATHER, Shape.array("s64", expect.shape), [Shape.array("s64", x.shape),
                Shape.array("s32", idx.shape)], gather_dnums=dn, gather_slice_sizes=sizes)
    assert got.dims == expect.shape


def test_gather_with_batching_dims():
    # operand [B=3, N=5, F=2], indices [B=3, K=4, 1]; each batch gathers rows of its own slab.
    dn = GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(1,), start_index_map=(1,),
                                index_vector_dim=2, operand_batching_dims=(0,),
                                start_indices_batching_dims=(0,))
    got = infer(O.GATHER, "f32[3,4,2]", ["f32[3,5,2]", "s32[3,4,1]"], gather_dnums=dn,
                gather_slice_sizes=(1, 1, 2))
    assert got.dims == (3, 4, 2)
    with pytest.raises(VerifyError, match="operand batching dimension 0 \\(size 3\\)"):
        infer(O.GATHER, "f32[2,4,2]", ["f32[3,5,2]", "s32[2,4,1]"], gather_dnums=dn,
              gather_slice_sizes=(1, 1, 2))


@SETTINGS
@given(gathers())
def test_scatter_accepts_gather_shaped_updates(case):
    x, idx, dn, sizes = case
    updates = naive_gather(x, idx, dn, sizes)
    sdn = ScatterDimensionNumbers(dn.offset_dims, dn.collapsed_slice_dims, dn.start_index_map,
                                  dn.index_vector_dim)
    add = scalar_computation("add", O.ADD)
    shapes = [f32(x.shape), Shape.array("s32", idx.shape), f32(updates.shape)]
    got = infer(O.SCATTER, f32(x.shape), shapes, called=(add,), scatter_dnums=sdn)
    assert got.dims == x.shape
    scatter_dims = [d for d in range(updates.ndim) if d not in dn.offset_dims]
    if scatter_dims:
        bad = list(updates.shape)
        bad[scatter_dims[0]] += 1
        with pytest.raises(VerifyError, match="scatter dimensions"):
            infer(O.SCATTER, f32(x.shape), shapes[:2] + [f32(bad)], called=(add,),
                  scatter_dnums=sdn)


def test_variadic_scatter_returns_a_tuple():
    add2 = scalar_computation("add2", O.ADD, n=2)
    sdn = ScatterDimensionNumbers((1,), (0,), (0,), 1)
    got = infer(O.SCATTER, "(f32[5,3], f32[5,3])",
                ["f32[5,3]", "f32[5,3]", "s32[4,1]", "f32[4,3]", "f32[4,3]"],
                called=(add2,), scatter_dnums=sdn)
    assert got.compatible(Shape.tuple_of([f32((5, 3)), f32((5, 3))]))
