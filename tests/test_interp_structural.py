"""Reference interpreter: structural ops against independent naive NumPy loops.

Each test builds a one-instruction computation, runs it on the interpreter and compares with a
straightforward loop written from XLA's operation semantics (not from the implementation).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hloc.ir import (
    Attrs,
    Computation,
    GatherDimensionNumbers,
    Layout,
    Opcode,
    PaddingDim,
    ScatterDimensionNumbers,
    Shape,
    SliceDim,
)
from hloc.ir.dtypes import from_numpy
from hloc.runtime.interpreter import evaluate_computation

pytestmark = pytest.mark.pure
RNG = np.random.default_rng(1234)


# ---- building blocks --------------------------------------------------------------------------

def shape_of(a) -> Shape:
    if isinstance(a, tuple):
        return Shape.tuple_of(shape_of(x) for x in a)
    return Shape.array(from_numpy(a.dtype), a.shape)


def run(opcode, out_shape, operands, called=(), param_shapes=None, **attrs):
    """Evaluate one instruction of `opcode` applied to parameters holding `operands`."""
    comp = Computation("entry")
    shapes = param_shapes or [shape_of(a) for a in operands]
    params = [comp.create(Opcode.PARAMETER, s, attrs=Attrs(parameter_number=i))
              for i, s in enumerate(shapes)]
    comp.root = comp.create(opcode, out_shape, params, called=called, attrs=Attrs(**attrs))
    return evaluate_computation(comp, list(operands))


def scalar_comp(opcode, dtype, n=1, **attrs) -> Computation:
    """op(p0, p1) on scalars of `dtype` (n operands: op(p_i, p_{n+i}) as a tuple)."""
    comp = Computation(f"{opcode.value}_comp")
    s = Shape.scalar(from_numpy(np.dtype(dtype)))
    params = [comp.create(Opcode.PARAMETER, s, attrs=Attrs(parameter_number=i)) for i in range(2 * n)]
    out_shape = Shape.scalar("pred") if opcode == Opcode.COMPARE else s
    outs = [comp.create(opcode, out_shape, [params[i], params[n + i]], attrs=Attrs(**attrs))
            for i in range(n)]
    comp.root = outs[0] if n == 1 else comp.create(Opcode.TUPLE, Shape.tuple_of(o.shape for o in outs), outs)
    return comp


def rand(shape, dtype=np.float32, lo=-5, hi=5):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return RNG.integers(max(lo, np.iinfo(dtype).min), hi, size=shape).astype(dtype)
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(bool)
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def arr(shape, dtype):
    return Shape.array(from_numpy(np.dtype(dtype)), shape)


# ---- data movement ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_, ml_dtypes.bfloat16, np.uint64])
def test_broadcast_reshape_transpose(dtype):
    x = rand((2, 3), dtype)
    out = run(Opcode.BROADCAST, arr((3, 4, 2), dtype), [x], dimensions=(2, 0))
    for i, j, k in np.ndindex(3, 4, 2):
        assert out[i, j, k] == x[k, i]
    t = run(Opcode.TRANSPOSE, arr((3, 2), dtype), [x], dimensions=(1, 0))
    assert all(t[j, i] == x[i, j] for i, j in np.ndindex(2, 3))
    r = run(Opcode.RESHAPE, arr((3, 1, 2), dtype), [x])
    assert [r[i // 2, 0, i % 2] for i in range(6)] == [x[i // 3, i % 3] for i in range(6)]


def test_slice_reverse_concat_iota():
    x = rand((5, 7))
    s = run(Opcode.SLICE, arr((2, 3), np.float32), [x], slice=(SliceDim(1, 5, 2), SliceDim(0, 7, 3)))
    assert s.tolist() == [[x[i, j] for j in (0, 3, 6)] for i in (1, 3)]
    r = run(Opcode.REVERSE, arr((5, 7), np.float32), [x], dimensions=(1,))
    assert all(r[i, j] == x[i, 6 - j] for i, j in np.ndindex(5, 7))
    y = rand((5, 0))
    c = run(Opcode.CONCATENATE, arr((5, 14), np.float32), [x, y, x], dimensions=(1,))
    assert c[:, :7].tolist() == x.tolist() and c[:, 7:].tolist() == x.tolist()
    for dt in (np.int32, ml_dtypes.bfloat16, np.uint8):
        io = run(Opcode.IOTA, arr((3, 4), dt), [], dimensions=(1,))
        assert [[float(v) for v in row] for row in io] == [[0, 1, 2, 3]] * 3


def naive_dynamic_start(start, dim, size):
    return min(max(int(start), 0), dim - size)


@pytest.mark.parametrize("starts", [(0, 0), (2, 1), (-3, 9), (100, -100), (4, 5)])
def test_dynamic_slice_and_update(starts):
    x = rand((6, 7))
    idx = [np.array(s, np.int32) for s in starts]
    sizes = (3, 2)
    out = run(Opcode.DYNAMIC_SLICE, arr(sizes, np.float32), [x] + idx, dynamic_slice_sizes=sizes)
    s0, s1 = (naive_dynamic_start(s, d, n) for s, d, n in zip(starts, x.shape, sizes, strict=False))
    for i, j in np.ndindex(*sizes):
        assert out[i, j] == x[s0 + i, s1 + j]
    upd = rand(sizes)
    res = run(Opcode.DYNAMIC_UPDATE_SLICE, arr(x.shape, np.float32), [x, upd] + idx)
    expect = x.copy()
    for i, j in np.ndindex(*sizes):
        expect[s0 + i, s1 + j] = upd[i, j]
    assert np.array_equal(res, expect)
    u = np.array(200, np.uint32)  # unsigned starts clamp too
    out = run(Opcode.DYNAMIC_SLICE, arr(sizes, np.float32), [x, u, u], dynamic_slice_sizes=sizes)
    assert np.array_equal(out, x[3:, 5:])


def naive_pad(x, value, cfg):
    out_shape = [p.low + n + max(n - 1, 0) * p.interior + p.high for n, p in zip(x.shape, cfg, strict=False)]
    out = np.full(out_shape, value, x.dtype)
    for idx in np.ndindex(*x.shape):
        pos = [p.low + i * (p.interior + 1) for i, p in zip(idx, cfg, strict=False)]
        if all(0 <= q < n for q, n in zip(pos, out_shape, strict=False)):
            out[tuple(pos)] = x[idx]
    return out


@pytest.mark.parametrize("cfg", [
    ((1, 2, 0), (0, 0, 1)), ((-1, 2, 1), (2, -3, 0)), ((-2, -1, 2), (-1, 0, 3)), ((0, 0, 0), (3, 1, 0)),
])
def test_pad(cfg):
    cfg = tuple(PaddingDim(*c) for c in cfg)
    x = rand((4, 3), np.int32)
    expect = naive_pad(x, -7, cfg)
    out = run(Opcode.PAD, arr(expect.shape, np.int32), [x, np.array(-7, np.int32)], padding=cfg)
    assert np.array_equal(out, expect)
    empty = np.zeros((0, 3), np.int32)
    if cfg[0].low + cfg[0].high < 0:
        return  # not a valid padding of an empty dimension
    expect = naive_pad(empty, 5, cfg)
    out = run(Opcode.PAD, arr(expect.shape, np.int32), [empty, np.array(5, np.int32)], padding=cfg)
    assert np.array_equal(out, expect)


def test_bitcast_respects_layouts():
    x = rand((3, 4))
    # Same bytes, row-major {1,0} as [3,4] read back through a column-major [4,3]{0,1}.
    src = Shape.array("f32", (3, 4), Layout((1, 0)))
    dst = Shape.array("f32", (4, 3), Layout((0, 1)))
    out = run(Opcode.BITCAST, dst, [x], param_shapes=[src])
    memory = x.reshape(-1)  # physical order of the source
    for i, j in np.ndindex(4, 3):
        assert out[i, j] == memory[i + 4 * j]  # column-major: dim 0 is minor
    scalar = run(Opcode.BITCAST, Shape.scalar("s32"), [np.array(1.0, np.float32)])
    assert int(scalar) == 0x3F800000
    gds = run(Opcode.GET_DIMENSION_SIZE, Shape.scalar("s32"), [x], dimensions=(1,))
    assert int(gds) == 4


# ---- gather / scatter -------------------------------------------------------------------------

def _index_vector(indices, ivd, batch):
    if ivd == indices.ndim:
        return [indices[tuple(batch)]]
    pos = list(batch)
    pos.insert(ivd, slice(None))
    return list(indices[tuple(pos)])


def naive_gather(operand, indices, dn, sizes, out_shape):
    out = np.empty(out_shape, operand.dtype)
    batch_dims = [d for d in range(len(out_shape)) if d not in dn.offset_dims]
    window = [d for d in range(operand.ndim)
              if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    for oi in np.ndindex(*out_shape):
        g = [oi[d] for d in batch_dims]
        vec = _index_vector(indices, dn.index_vector_dim, g)
        start = [0] * operand.ndim
        for k, d in enumerate(dn.start_index_map):
            start[d] = min(max(int(vec[k]), 0), operand.shape[d] - sizes[d])
        for d, idim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims, strict=False):
            start[d] = g[idim if idim < dn.index_vector_dim else idim - 1]
        for j, d in enumerate(window):
            start[d] += oi[dn.offset_dims[j]]
        out[oi] = operand[tuple(start)]
    return out


GATHER_CASES = [
    # (operand shape, indices, dnums, slice sizes, out shape)
    ((5, 4), [[0], [3], [-2], [9]], GatherDimensionNumbers((1,), (0,), (0,), 1), (1, 4), (4, 4)),
    ((5, 4), [[0, 1], [4, 3], [2, 2]], GatherDimensionNumbers((1, 2), (), (0, 1), 1), (2, 2), (3, 2, 2)),
    ((5, 4), [[1, 3, 0]], GatherDimensionNumbers((0,), (1,), (1,), 0), (3, 1), (3, 3)),
    ((6,), [2, 5, 0], GatherDimensionNumbers((), (0,), (0,), 1), (1,), (3,)),
    # operand_batching_dims: per-batch take_along_axis
    ((3, 5, 2), [[[1], [4]], [[0], [0]], [[3], [7]]],
     GatherDimensionNumbers((2,), (1,), (1,), 2, (0,), (0,)), (1, 1, 2), (3, 2, 2)),
    ((2, 4, 3), [[[0, 2], [1, 1]], [[3, 0], [2, 5]]],
     GatherDimensionNumbers((), (1, 2), (1, 2), 2, (0,), (0,)), (1, 1, 1), (2, 2)),
    ((0, 4), [[0], [1]], GatherDimensionNumbers((1, 2), (), (0,), 1), (0, 4), (2, 0, 4)),
    ((5, 4), np.zeros((0, 1), np.int32), GatherDimensionNumbers((1,), (0,), (0,), 1), (1, 4), (0, 4)),
]


@pytest.mark.parametrize("case", range(len(GATHER_CASES)))
def test_gather(case):
    op_shape, indices, dn, sizes, out_shape = GATHER_CASES[case]
    operand = rand(op_shape)
    indices = np.array(indices, np.int32)
    expect = naive_gather(operand, indices, dn, sizes, out_shape)
    out = run(Opcode.GATHER, arr(out_shape, np.float32), [operand, indices],
              gather_dnums=dn, gather_slice_sizes=sizes)
    assert np.array_equal(out, expect)


def naive_scatter(operands, indices, updates, dn, fn):
    outs = [o.copy() for o in operands]
    upd_shape = updates[0].shape
    scatter_dims = [d for d in range(len(upd_shape)) if d not in dn.update_window_dims]
    window = [d for d in range(operands[0].ndim)
              if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]
    wsizes = [upd_shape[d] for d in dn.update_window_dims]
    for g in np.ndindex(*[upd_shape[d] for d in scatter_dims]):  # in scatter-index order
        vec = _index_vector(indices, dn.index_vector_dim, g)
        start = [0] * operands[0].ndim
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            start[d] = int(vec[k])
        for d, idim in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims, strict=False):
            start[d] = g[idim if idim < dn.index_vector_dim else idim - 1]
        ext = [wsizes[window.index(d)] if d in window else 1 for d in range(len(start))]
        if not all(0 <= s and s + e <= n for s, e, n in zip(start, ext, operands[0].shape, strict=False)):
            continue
        for w in np.ndindex(*wsizes):
            ui = [0] * len(upd_shape)
            for d, gi in zip(scatter_dims, g, strict=False):
                ui[d] = gi
            for d, wi in zip(dn.update_window_dims, w, strict=False):
                ui[d] = wi
            target = list(start)
            for d, wi in zip(window, w, strict=False):
                target[d] += wi
            t = tuple(target)
            new = fn(*[o[t] for o in outs], *[u[tuple(ui)] for u in updates])
            for o, v in zip(outs, new if isinstance(new, tuple) else (new,), strict=False):
                o[t] = v
    return outs


SCATTER_CASES = [
    ((6,), [[1], [3], [1], [7], [-1], [1]], ScatterDimensionNumbers((), (0,), (0,), 1), (6,)),
    ((5, 3), [[0], [4], [2], [4]], ScatterDimensionNumbers((1,), (0,), (0,), 1), (4, 3)),
    ((5, 3), [[3], [4], [0]], ScatterDimensionNumbers((1, 2), (), (0,), 1), (3, 2, 3)),
    ((4, 5), [[0, 1], [3, 3], [2, 4]], ScatterDimensionNumbers((0,), (0,), (0, 1), 1), (2, 3)),
    ((3, 5), [[[1], [1]], [[4], [0]], [[5], [2]]],
     ScatterDimensionNumbers((), (1,), (1,), 2, (0,), (0,)), (3, 2)),
    ((4,), np.zeros((0, 1)), ScatterDimensionNumbers((), (0,), (0,), 1), (0,)),
]


@pytest.mark.parametrize("case", range(len(SCATTER_CASES)))
@pytest.mark.parametrize("combiner", ["add", "replace", "max", "sub"])
def test_scatter(case, combiner):
    op_shape, indices, dn, upd_shape = SCATTER_CASES[case]
    operand = rand(op_shape)
    indices = np.array(indices, np.int32)
    updates = rand(upd_shape)
    comp = {"add": scalar_comp(Opcode.ADD, np.float32), "max": scalar_comp(Opcode.MAXIMUM, np.float32),
            "sub": scalar_comp(Opcode.SUBTRACT, np.float32)}.get(combiner)
    if comp is None:
        comp = scalar_comp(Opcode.ADD, np.float32)
        comp.root = comp.parameter(1)
    fn = {"add": lambda a, b: np.float32(a + b), "max": lambda a, b: max(a, b),
          "sub": lambda a, b: np.float32(a - b), "replace": lambda a, b: b}[combiner]
    expect = naive_scatter([operand], indices, [updates], dn, fn)[0]
    out = run(Opcode.SCATTER, arr(op_shape, np.float32), [operand, indices, updates], called=[comp],
              scatter_dnums=dn)
    assert np.array_equal(out, expect)


def test_variadic_scatter_duplicates_in_order():
    # A non-commutative two-operand combiner: the result depends on the order of duplicates.
    comp = Computation("pair")
    f, i = Shape.scalar("f32"), Shape.scalar("s32")
    ps = [comp.create(Opcode.PARAMETER, s, attrs=Attrs(parameter_number=k)) for k, s in enumerate((f, i, f, i))]
    sub = comp.create(Opcode.SUBTRACT, f, [ps[0], ps[2]])
    mul = comp.create(Opcode.MULTIPLY, i, [ps[1], ps[3]])
    add = comp.create(Opcode.ADD, i, [mul, ps[3]])
    comp.root = comp.create(Opcode.TUPLE, Shape.tuple_of([f, i]), [sub, add])
    dn = ScatterDimensionNumbers((), (0,), (0,), 1)
    indices = np.array([[2], [0], [2], [2], [5], [0]], np.int32)
    ops = [rand((4,)), rand((4,), np.int32), indices, rand((6,)), rand((6,), np.int32, -3, 3)]
    expect = naive_scatter(ops[:2], indices, ops[3:], dn,
                           lambda a, b, c, d: (np.float32(a - c), np.int32(b * d + d)))
    out = run(Opcode.SCATTER, Shape.tuple_of([arr((4,), np.float32), arr((4,), np.int32)]), ops,
              called=[comp], scatter_dnums=dn)
    assert np.array_equal(out[0], expect[0]) and np.array_equal(out[1], expect[1])
