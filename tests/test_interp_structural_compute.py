"""Reference interpreter: reductions, windows, contractions, sort and control flow against naive
NumPy loops written from XLA's operation semantics."""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest

from hloc.ir import (
    Attrs,
    CholeskyOptions,
    Computation,
    ConvDimensionNumbers,
    DotDimensionNumbers,
    Literal,
    Opcode,
    ScatterDimensionNumbers,
    Shape,
    TriangularSolveOptions,
    Window,
    WindowDimension,
)
from hloc.ir.dtypes import from_numpy
from hloc.runtime.interpreter import evaluate_computation
from hloc.runtime.interpreter.registry import Context
from hloc.runtime.interpreter.sort import comparator_keys, merge_sort_perm
from tests.test_interp_structural import arr, rand, run, scalar_comp

pytestmark = pytest.mark.pure
RNG = np.random.default_rng(99)


def param(comp, n, shape):
    return comp.create(Opcode.PARAMETER, shape, attrs=Attrs(parameter_number=n))


def argmax_comp(vdt=np.float32) -> Computation:
    """JAX's argmax reducer: larger value wins (NaN wins), ties take the smaller index."""
    comp = Computation("argmax")
    v, i = Shape.scalar(from_numpy(np.dtype(vdt))), Shape.scalar("s32")
    a, ai, b, bi = param(comp, 0, v), param(comp, 1, i), param(comp, 2, v), param(comp, 3, i)
    p = Shape.scalar("pred")
    gt = comp.create(Opcode.COMPARE, p, [a, b], attrs=Attrs(comparison_direction="GT"))
    a_nan = comp.create(Opcode.COMPARE, p, [a, a], attrs=Attrs(comparison_direction="NE"))
    pick_a = comp.create(Opcode.OR, p, [gt, a_nan])
    eq = comp.create(Opcode.COMPARE, p, [a, b], attrs=Attrs(comparison_direction="EQ"))
    lt_i = comp.create(Opcode.COMPARE, p, [ai, bi], attrs=Attrs(comparison_direction="LT"))
    tie = comp.create(Opcode.AND, p, [eq, lt_i])
    take_a = comp.create(Opcode.OR, p, [pick_a, tie])
    val = comp.create(Opcode.SELECT, v, [take_a, a, b])
    idx = comp.create(Opcode.SELECT, i, [take_a, ai, bi])
    comp.root = comp.create(Opcode.TUPLE, Shape.tuple_of([v, i]), [val, idx])
    return comp


def py_argmax(a, ai, b, bi):
    take_a = a > b or a != a or (a == b and ai < bi)
    return (a, ai) if take_a else (b, bi)


# ---- reduce -----------------------------------------------------------------------------------

def naive_reduce(arrays, inits, dims, fn):
    kept = [d for d in range(arrays[0].ndim) if d not in dims]
    out_shape = tuple(arrays[0].shape[d] for d in kept)
    outs = [np.empty(out_shape, a.dtype) for a in arrays]
    for oi in np.ndindex(*out_shape):
        acc = tuple(inits)
        for ri in np.ndindex(*[arrays[0].shape[d] for d in dims]):
            full = [0] * arrays[0].ndim
            for d, v in zip(kept, oi, strict=False):
                full[d] = v
            for d, v in zip(dims, ri, strict=False):
                full[d] = v
            acc = fn(*acc, *[a[tuple(full)] for a in arrays])
            acc = acc if isinstance(acc, tuple) else (acc,)
        for o, v in zip(outs, acc, strict=False):
            o[oi] = v
    return outs


@pytest.mark.parametrize("shape,dims", [((4, 5, 3), (1,)), ((4, 5, 3), (0, 2)), ((3, 0), (1,)),
                                        ((300,), (0,)), ((2, 3), ())])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint32, ml_dtypes.bfloat16, np.float64])
def test_reduce_add(shape, dims, dtype):
    x = rand(shape, dtype)
    init = np.array(3, dtype)
    out_shape = tuple(n for d, n in enumerate(shape) if d not in dims)
    out = run(Opcode.REDUCE, arr(out_shape, dtype), [x, init], called=[scalar_comp(Opcode.ADD, dtype)],
              dimensions=dims)
    wide = np.float64 if np.dtype(dtype).kind in "fV" else np.int64
    expect = naive_reduce([x.astype(wide)], [wide(3)], dims, lambda a, b: a + b)[0]
    if np.dtype(dtype).kind in "iu":
        assert np.array_equal(out, expect.astype(dtype))  # wraps
    elif np.dtype(dtype).itemsize < 4:
        # Narrow floats: every step rounds to the type, left to right (as XLA's loops).
        stepwise = naive_reduce([x], [dtype(3)], dims, lambda a, b: a + b)[0]
        count = math.prod(shape[d] for d in dims)
        if count <= 64:
            assert np.array_equal(out, stepwise)
        np.testing.assert_allclose(out.astype(np.float64), expect, rtol=5e-2, atol=5e-2)
    else:
        np.testing.assert_allclose(out.astype(np.float64), expect, rtol=1e-5)


def test_reduce_max_nan_and_empty():
    x = rand((3, 4))
    x[1, 2] = np.nan
    out = run(Opcode.REDUCE, arr((3,), np.float32), [x, np.array(-np.inf, np.float32)],
              called=[scalar_comp(Opcode.MAXIMUM, np.float32)], dimensions=(1,))
    assert np.isnan(out[1]) and out[0] == x[0].max() and out[2] == x[2].max()
    e = np.zeros((0, 4), np.float32)
    out = run(Opcode.REDUCE, arr((4,), np.float32), [e, np.array(-np.inf, np.float32)],
              called=[scalar_comp(Opcode.MAXIMUM, np.float32)], dimensions=(0,))
    assert np.all(out == -np.inf)


@pytest.mark.parametrize("n", [7, 150])
def test_variadic_argmax_reduce(n):
    x = RNG.integers(0, 5, size=(3, n)).astype(np.float32)  # many ties
    x[2, n // 2] = np.nan
    idx = np.broadcast_to(np.arange(n, dtype=np.int32), x.shape).copy()
    inits = [np.array(-np.inf, np.float32), np.array(0, np.int32)]
    shape = Shape.tuple_of([arr((3,), np.float32), arr((3,), np.int32)])
    out = run(Opcode.REDUCE, shape, [x, idx] + inits, called=[argmax_comp()], dimensions=(1,))
    expect = naive_reduce([x, idx], inits, (1,), py_argmax)
    assert np.array_equal(out[1], expect[1])
    np.testing.assert_array_equal(out[0], expect[0])


# ---- reduce-window / select-and-scatter -------------------------------------------------------

def window_input_index(o, w, wd, n):
    """The operand index under output o, window tap w (None if padding or a dilation hole)."""
    p = o * wd.stride + w * wd.window_dilation - wd.padding_low
    if p % wd.base_dilation:
        return None
    q = p // wd.base_dilation
    return q if 0 <= q < n else None


def naive_reduce_window(arrays, inits, window, out_shape, fn):
    outs = [np.empty(out_shape, a.dtype) for a in arrays]
    for oi in np.ndindex(*out_shape):
        acc = tuple(inits)
        for wi in itertools.product(*(range(w.size) for w in window.dims)):
            pos = [window_input_index(o, w, wd, n)
                   for o, w, wd, n in zip(oi, wi, window.dims, arrays[0].shape, strict=False)]
            if None not in pos:
                acc = fn(*acc, *[a[tuple(pos)] for a in arrays])
                acc = acc if isinstance(acc, tuple) else (acc,)
        for o, v in zip(outs, acc, strict=False):
            o[oi] = v
    return outs


def out_size(n, wd):
    dilated = (n - 1) * wd.base_dilation + 1 if n else 0
    span = (wd.size - 1) * wd.window_dilation + 1
    padded = dilated + wd.padding_low + wd.padding_high
    return max(0, (padded - span) // wd.stride + 1) if padded >= span else 0


WINDOWS = [
    (WindowDimension(3, 1, 1, 1), WindowDimension(2, 2, 0, 1)),
    (WindowDimension(2, 1, 0, 0, 2, 1), WindowDimension(3, 2, 2, 2, 1, 2)),
    (WindowDimension(3, 2, 1, 0, 1, 3), WindowDimension(1, 1, -1, 0)),
    (WindowDimension(5, 1, 0, 0), WindowDimension(1, 3, 0, 0)),
]


@pytest.mark.parametrize("dims", WINDOWS)
@pytest.mark.parametrize("init", [0.0, 1.5])
def test_reduce_window(dims, init):
    window = Window(dims)
    x = rand((5, 6))
    out_shape = tuple(out_size(n, wd) for n, wd in zip(x.shape, dims, strict=False))
    out = run(Opcode.REDUCE_WINDOW, arr(out_shape, np.float32), [x, np.array(init, np.float32)],
              called=[scalar_comp(Opcode.ADD, np.float32)], window=window)
    expect = naive_reduce_window([x], [np.float32(init)], window, out_shape,
                                 lambda a, b: np.float32(a + b))[0]
    np.testing.assert_array_equal(out, expect)
    # A non-simple (variadic) reducer takes the generic path.
    idx = np.arange(x.size, dtype=np.int32).reshape(x.shape)
    inits = [np.array(-np.inf, np.float32), np.array(-1, np.int32)]
    shape = Shape.tuple_of([arr(out_shape, np.float32), arr(out_shape, np.int32)])
    got = run(Opcode.REDUCE_WINDOW, shape, [x, idx] + inits, called=[argmax_comp()], window=window)
    expect = naive_reduce_window([x, idx], inits, window, out_shape, py_argmax)
    assert np.array_equal(got[0], expect[0]) and np.array_equal(got[1], expect[1])


def naive_select_and_scatter(x, source, init, window, ge):
    out = np.full(x.shape, init, x.dtype)
    for oi in np.ndindex(*source.shape):
        best = None
        for wi in itertools.product(*(range(w.size) for w in window.dims)):
            pos = [window_input_index(o, w, wd, n) for o, w, wd, n in zip(oi, wi, window.dims, x.shape, strict=False)]
            if None in pos:
                continue
            if best is None or not ge(x[best], x[tuple(pos)]):
                best = tuple(pos)
        if best is not None:
            out[best] += source[oi]
    return out


@pytest.mark.parametrize("dims", [
    (WindowDimension(2, 2), WindowDimension(2, 2)),
    (WindowDimension(3, 2, 1, 1), WindowDimension(3, 1, 1, 1)),
    (WindowDimension(3, 1, 0, 0), WindowDimension(2, 1, 0, 1)),
])
def test_select_and_scatter(dims):
    window = Window(dims)
    x = RNG.integers(0, 4, size=(6, 5)).astype(np.float32)  # ties: the first maximum wins
    out_shape = tuple(out_size(n, wd) for n, wd in zip(x.shape, dims, strict=False))
    source = rand(out_shape)
    select = scalar_comp(Opcode.COMPARE, np.float32, comparison_direction="GE")
    out = run(Opcode.SELECT_AND_SCATTER, arr(x.shape, np.float32), [x, source, np.array(0, np.float32)],
              called=[select, scalar_comp(Opcode.ADD, np.float32)], window=window)
    expect = naive_select_and_scatter(x, source, 0, window, lambda a, b: a >= b)
    np.testing.assert_allclose(out, expect, rtol=1e-6)


# ---- dot / convolution ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,out_dtype", [(np.float32, np.float32), (np.int8, np.int8),
                                             (np.int8, np.int32), (ml_dtypes.bfloat16, np.float32),
                                             (ml_dtypes.bfloat16, ml_dtypes.bfloat16), (np.bool_, np.bool_),
                                             (np.complex64, np.complex64)])
def test_dot(dtype, out_dtype):
    lhs = rand((2, 3, 4, 5), dtype, -100, 100) if np.dtype(dtype).kind != "c" else \
        (rand((2, 3, 4, 5)) + 1j * rand((2, 3, 4, 5))).astype(dtype)
    rhs = rand((5, 2, 4, 6), dtype, -100, 100) if np.dtype(dtype).kind != "c" else \
        (rand((5, 2, 4, 6)) + 1j * rand((5, 2, 4, 6))).astype(dtype)
    dn = DotDimensionNumbers((2, 3), (2, 0), (0,), (1,))
    out = run(Opcode.DOT, arr((2, 3, 6), out_dtype), [lhs, rhs], dot_dnums=dn)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else (
        np.int64 if np.dtype(dtype).kind in "iub" else np.float64)
    expect = np.zeros((2, 3, 6), wide)
    magnitude = np.zeros((2, 3, 6))
    for b, i, j, k, c in itertools.product(range(2), range(3), range(6), range(4), range(5)):
        term = wide(lhs[b, i, k, c]) * wide(rhs[c, b, k, j])
        expect[b, i, j] += term
        magnitude[b, i, j] += abs(term)
    if np.dtype(out_dtype).kind in "iub":
        assert np.array_equal(out, expect.astype(np.int64).astype(out_dtype) if out_dtype != np.bool_
                              else expect != 0)
    else:
        # A sum of 20 products accumulated in the output type is off by at most about
        # 20 ulps of the sum of the products' magnitudes, whatever order it adds them in;
        # a relative bound alone fails where the terms cancel.
        steps = 20 * float(ml_dtypes.finfo(np.float32 if np.dtype(out_dtype).kind == "c"
                                           else out_dtype).eps)
        error = np.abs(out.astype(wide) - expect.astype(out_dtype).astype(wide))
        assert np.all(error <= steps * magnitude * (2 if np.dtype(out_dtype).kind == "c" else 1)
                      + 1e-4), float(np.max(error / (magnitude + 1e-30)))


def naive_conv(x, w, window, fg, bg, out_spatial):
    """NCHW input, OIHW kernel, NCHW output; x/w in float64."""
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    nb, og_f, og_b = n // bg, o // fg, o // bg
    out = np.zeros((nb, o) + tuple(out_spatial))
    for b, oc in itertools.product(range(nb), range(o)):
        g, gb = oc // og_f, oc // og_b
        for oi in np.ndindex(*out_spatial):
            acc = 0.0
            for ic, taps in itertools.product(range(cg), np.ndindex(*w.shape[2:])):
                pos = [window_input_index(p, t, wd, size)
                       for p, t, wd, size in zip(oi, taps, window.dims, x.shape[2:], strict=False)]
                if None in pos:
                    continue
                k = tuple(wd.size - 1 - t if wd.window_reversal else t for t, wd in zip(taps, window.dims, strict=False))
                acc += x[(gb * nb + b, g * cg + ic) + tuple(pos)] * w[(oc, ic) + k]
            out[(b, oc) + oi] = acc
    return out


CONV_CASES = list(itertools.product([1, 2], [1, 2], [1, 2], [(1, 1), (2, 1), (1, 2)], [False, True]))


@pytest.mark.parametrize("lhs_dil,rhs_dil,stride,groups,reverse", CONV_CASES)
def test_convolution(lhs_dil, rhs_dil, stride, groups, reverse):
    fg, bg = groups
    window = Window((WindowDimension(3, stride, 1, -1 if lhs_dil == 2 else 0, rhs_dil, lhs_dil, reverse),
                     WindowDimension(2, 1, 0, 2, 1, 1)))
    n, c, o = 2 * bg, 2 * fg, 2 * fg * bg
    x = rand((n, c, 7, 4))
    w = rand((o, c // fg, 3, 2))
    out_spatial = [out_size(s, wd) for s, wd in zip(x.shape[2:], window.dims, strict=False)]
    expect = naive_conv(x.astype(np.float64), w.astype(np.float64), window, fg, bg, out_spatial)
    # Exercise dim_labels: input b01f -> stored NHWC, kernel 01io, output f01b.
    xs, ws = np.transpose(x, (0, 2, 3, 1)), np.transpose(w, (2, 3, 1, 0))
    dn = ConvDimensionNumbers(0, 3, (1, 2), 2, 3, (0, 1), 3, 0, (1, 2))
    out_shape = (o,) + tuple(out_spatial) + (n // bg,)
    out = run(Opcode.CONVOLUTION, arr(out_shape, np.float32), [xs, ws], conv_dnums=dn, window=window,
              feature_group_count=fg, batch_group_count=bg)
    np.testing.assert_allclose(np.transpose(out, (3, 0, 1, 2)), expect, rtol=1e-5, atol=1e-4)


def test_convolution_int_and_empty():
    x = rand((1, 2, 5), np.int8, -100, 100)
    w = rand((3, 2, 2), np.int8, -100, 100)
    window = Window((WindowDimension(2),))
    dn = ConvDimensionNumbers(0, 1, (2,), 1, 0, (2,), 0, 1, (2,))
    out = run(Opcode.CONVOLUTION, arr((1, 3, 4), np.int8), [x, w], conv_dnums=dn, window=window)
    expect = naive_conv(x.astype(np.float64), w.astype(np.float64), window, 1, 1, [4])
    assert np.array_equal(out, expect.astype(np.int64).astype(np.int8))
    e = np.zeros((0, 2, 5), np.float32)
    out = run(Opcode.CONVOLUTION, arr((0, 3, 4), np.float32), [e, w.astype(np.float32)],
              conv_dnums=dn, window=window)
    assert out.shape == (0, 3, 4)


# ---- fft / linear algebra ---------------------------------------------------------------------

def naive_dft(x, axes, inverse=False):
    out = x.astype(np.complex128)
    for ax in axes:
        n = out.shape[ax]
        k = np.arange(n)
        m = np.exp((2j if inverse else -2j) * np.pi * np.outer(k, k) / n) / (n if inverse else 1)
        out = np.moveaxis(np.tensordot(np.moveaxis(out, ax, -1), m, axes=([-1], [1])), -1, ax)
    return out


def test_fft_kinds():
    x = (rand((3, 4, 6)) + 1j * rand((3, 4, 6))).astype(np.complex64)
    out = run(Opcode.FFT, arr(x.shape, np.complex64), [x], fft_type=0, fft_length=(4, 6))
    np.testing.assert_allclose(out, naive_dft(x, (1, 2)), rtol=1e-4, atol=1e-4)
    out = run(Opcode.FFT, arr(x.shape, np.complex64), [x], fft_type=1, fft_length=(6,))
    np.testing.assert_allclose(out, naive_dft(x, (2,), True), rtol=1e-4, atol=1e-4)
    r = rand((3, 8))
    out = run(Opcode.FFT, arr((3, 5), np.complex64), [r], fft_type=2, fft_length=(8,))
    np.testing.assert_allclose(out, naive_dft(r, (1,))[:, :5], rtol=1e-4, atol=1e-4)
    back = run(Opcode.FFT, arr((3, 8), np.float32), [out], fft_type=3, fft_length=(8,))
    np.testing.assert_allclose(back, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("left,lower,unit,trans", list(itertools.product([True, False], [True, False],
                                                                   [False, True], [1, 2, 3])))
def test_triangular_solve(left, lower, unit, trans):
    a = rand((2, 4, 4)) + 8 * np.eye(4, dtype=np.float32)
    b = rand((2, 4, 3) if left else (2, 3, 4))
    opts = TriangularSolveOptions(left, lower, unit, trans)
    x = run(Opcode.TRIANGULAR_SOLVE, arr(b.shape, np.float32), [a, b], triangular_solve_options=opts)
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        t[:, range(4), range(4)] = 1
    op = t if trans == 1 else np.swapaxes(t, -1, -2)
    np.testing.assert_allclose(op @ x if left else x @ op, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("lower", [True, False])
def test_cholesky(lower):
    m = rand((3, 4, 4))
    a = m @ np.swapaxes(m, -1, -2) + 4 * np.eye(4, dtype=np.float32)
    garbage = a + np.triu(rand((4, 4)), 1) if lower else a + np.tril(rand((4, 4)), -1)
    garbage[2] = -np.eye(4)  # not positive definite
    out = run(Opcode.CHOLESKY, arr(a.shape, np.float32), [garbage.astype(np.float32)],
              cholesky_options=CholeskyOptions(lower))
    f = out[:2]
    recon = f @ np.swapaxes(f, -1, -2) if lower else np.swapaxes(f, -1, -2) @ f
    np.testing.assert_allclose(recon, a[:2], rtol=1e-4, atol=1e-4)
    assert np.isnan(out[2]).all()


# ---- batch norm -------------------------------------------------------------------------------

def test_batch_norm():
    x = rand((4, 3, 5)).astype(np.float32)
    scale, offset = rand((3,)), rand((3,))
    shapes = [arr(x.shape, np.float32), arr((3,), np.float32), arr((3,), np.float32)]
    y, mean, var = run(Opcode.BATCH_NORM_TRAINING, Shape.tuple_of(shapes), [x, scale, offset],
                       epsilon=0.01, feature_index=1)
    for f in range(3):
        v = x[:, f, :].astype(np.float64)
        mu, sig = v.sum() / v.size, ((v - v.mean()) ** 2).sum() / v.size
        assert math.isclose(mean[f], mu, rel_tol=1e-5, abs_tol=1e-6)
        assert math.isclose(var[f], sig, rel_tol=1e-5)
        np.testing.assert_allclose(y[:, f, :], (v - mu) / np.sqrt(sig + 0.01) * scale[f] + offset[f],
                                   rtol=1e-4, atol=1e-5)
    inf = run(Opcode.BATCH_NORM_INFERENCE, shapes[0], [x, scale, offset, mean, var],
              epsilon=0.01, feature_index=1)
    np.testing.assert_allclose(inf, y, rtol=1e-4, atol=1e-5)
    dy = rand(x.shape)
    gx, gs, go = run(Opcode.BATCH_NORM_GRAD, Shape.tuple_of(shapes), [x, scale, mean, var, dy],
                     epsilon=0.01, feature_index=1)
    for f in range(3):  # finite-difference-free check: the closed form from the paper
        v, g = x[:, f, :].astype(np.float64), dy[:, f, :].astype(np.float64)
        xhat = (v - mean[f]) / np.sqrt(var[f] + 0.01)
        assert math.isclose(go[f], g.sum(), rel_tol=1e-4, abs_tol=1e-4)
        assert math.isclose(gs[f], (g * xhat).sum(), rel_tol=1e-4, abs_tol=1e-4)
        ref = scale[f] / np.sqrt(var[f] + 0.01) * (g - g.mean() - xhat * (g * xhat).mean())
        np.testing.assert_allclose(gx[:, f, :], ref, rtol=1e-3, atol=1e-4)


# ---- sort / topk ------------------------------------------------------------------------------

def total_key(v):
    """Python sort key for XLA's float TOTALORDER (sign-magnitude bits as a signed integer)."""
    bits = int(np.array(v, np.float32).view(np.int32))
    return bits ^ 0x7FFFFFFF if bits < 0 else bits


def lex_comparator(dtypes, directions, ctype) -> Computation:
    """JAX's multi-key form: or(lt(k0), and(eq(k0), or(lt(k1), ...)))."""
    comp = Computation("cmp")
    shapes = [Shape.scalar(from_numpy(np.dtype(d))) for d in dtypes]
    ps = [param(comp, k, shapes[k // 2]) for k in range(2 * len(dtypes))]
    p = Shape.scalar("pred")
    result = None
    for i in reversed(range(len(directions))):
        at = Attrs(comparison_direction=directions[i], comparison_type=ctype[i])
        lt = comp.create(Opcode.COMPARE, p, [ps[2 * i], ps[2 * i + 1]], attrs=at)
        if result is None:
            result = lt
            continue
        eq = comp.create(Opcode.COMPARE, p, [ps[2 * i], ps[2 * i + 1]],
                         attrs=Attrs(comparison_direction="EQ", comparison_type=ctype[i]))
        result = comp.create(Opcode.OR, p, [lt, comp.create(Opcode.AND, p, [eq, result])])
    comp.root = result
    return comp


def bitcast_total_order_gt() -> Computation:
    """The comparator XLA's CPU TopK uses: GT on sign-magnitude-fixed integer bit patterns."""
    comp = Computation("gt_total")
    f, i, p = Shape.scalar("f32"), Shape.scalar("s32"), Shape.scalar("pred")
    a, b, _, _ = (param(comp, k, s) for k, s in enumerate((f, f, i, i)))
    zero = comp.create(Opcode.CONSTANT, i, attrs=Attrs(literal=Literal.scalar(0, "s32")))
    mask = comp.create(Opcode.CONSTANT, i, attrs=Attrs(literal=Literal.scalar(0x7FFFFFFF, "s32")))
    keys = []
    for x in (a, b):
        bits = comp.create(Opcode.BITCAST, i, [x])
        neg = comp.create(Opcode.COMPARE, p, [bits, zero], attrs=Attrs(comparison_direction="LT"))
        flipped = comp.create(Opcode.XOR, i, [mask, bits])
        keys.append(comp.create(Opcode.SELECT, i, [neg, flipped, bits]))
    comp.root = comp.create(Opcode.COMPARE, p, keys, attrs=Attrs(comparison_direction="GT"))
    return comp


def naive_sort(columns, key):
    order = sorted(range(len(columns[0])), key=lambda j: key(*[c[j] for c in columns]))  # stable
    return [np.array([c[j] for j in order], c.dtype) for c in columns]


SPECIAL = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0], np.float32)


@pytest.mark.parametrize("n", [1, 9, 40])
@pytest.mark.parametrize("directions", [("LT",), ("GT",), ("LT", "GT"), ("GT", "LT")])
def test_sort_lexicographic(n, directions):
    a = RNG.choice(SPECIAL, size=(3, n)).astype(np.float32)  # NaN, ±0 and many ties
    b = RNG.integers(-3, 3, size=(3, n)).astype(np.int32)
    c = np.broadcast_to(np.arange(n, dtype=np.int32), (3, n)).copy()
    nkeys = len(directions)
    comp = lex_comparator([np.float32, np.int32, np.int32][:max(nkeys, 1)] + [np.int32] * (3 - nkeys),
                          directions, ["TOTALORDER", "SIGNED"])
    shape = Shape.tuple_of([arr(a.shape, np.float32), arr(a.shape, np.int32), arr(a.shape, np.int32)])
    out = run(Opcode.SORT, shape, [a, b, c], called=[comp], dimensions=(1,), is_stable=True)

    def key(x, y, z):
        k = [total_key(x), int(y)][:nkeys]
        return tuple(-v if d == "GT" else v for v, d in zip(k, directions, strict=False))

    for r in range(3):
        expect = naive_sort([a[r], b[r], c[r]], key)
        for got, exp in zip(out, expect, strict=False):
            assert got[r].tobytes() == exp.tobytes()


@pytest.mark.parametrize("n", [2, 17, 64, 100])
def test_sort_general_comparator(n):
    # |x| ascending is no lexicographic key form: the merge-sort path must handle it.
    comp = Computation("abs_lt")
    f, p = Shape.scalar("f32"), Shape.scalar("pred")
    a, b = param(comp, 0, f), param(comp, 1, f)
    comp.root = comp.create(Opcode.COMPARE, p, [comp.create(Opcode.ABS, f, [a]), comp.create(Opcode.ABS, f, [b])],
                            attrs=Attrs(comparison_direction="LT"))
    x = RNG.integers(-4, 5, size=(2, 3, n)).astype(np.float32)
    out = run(Opcode.SORT, arr(x.shape, np.float32), [x], called=[comp], dimensions=(2,), is_stable=True)
    for i, j in np.ndindex(2, 3):
        assert out[i, j].tolist() == sorted(x[i, j].tolist(), key=abs)
    y = np.moveaxis(x, 2, 0).copy()
    out = run(Opcode.SORT, arr(y.shape, np.float32), [y], called=[comp], dimensions=(0,), is_stable=True)
    expect = np.array([[sorted(r.tolist(), key=abs) for r in m] for m in x], np.float32)
    assert np.array_equal(np.moveaxis(out, 0, 2), expect)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_total_order(largest):
    x = RNG.choice(SPECIAL, size=(4, 12)).astype(np.float32)
    values, idx = run(Opcode.TOPK, Shape.tuple_of([arr((4, 5), np.float32), arr((4, 5), np.int32)]), [x],
                      k=5, largest=largest)
    for r in range(4):
        order = sorted(range(12), key=lambda j: (-total_key(x[r, j]) if largest else total_key(x[r, j]), j))
        assert idx[r].tolist() == order[:5]
        assert values[r].tobytes() == x[r, order[:5]].tobytes()


def test_cpu_topk_custom_call():
    x = RNG.choice(SPECIAL, size=(3, 10)).astype(np.float32)
    shape = Shape.tuple_of([arr((3, 4), np.float32), arr((3, 4), np.int32)])
    values, idx = run(Opcode.CUSTOM_CALL, shape, [x], called=[bitcast_total_order_gt()],
                      custom_call_target="TopK")
    for r in range(3):
        order = sorted(range(10), key=lambda j: (-total_key(x[r, j]), j))
        assert idx[r].tolist() == order[:4] and values[r].tobytes() == x[r, order[:4]].tobytes()
    from hloc.errors import UnsupportedError
    with pytest.raises(UnsupportedError, match="unsupported custom-call target foo"):
        run(Opcode.CUSTOM_CALL, arr((3, 10), np.float32), [x], custom_call_target="foo")


# ---- control flow -----------------------------------------------------------------------------

def test_while_and_conditional():
    s32 = Shape.scalar("s32")
    state = Shape.tuple_of([s32, s32])
    cond = Computation("cond")
    c_in = param(cond, 0, state)
    i = cond.create(Opcode.GET_TUPLE_ELEMENT, s32, [c_in], attrs=Attrs(tuple_index=0))
    ten = cond.create(Opcode.CONSTANT, s32, attrs=Attrs(literal=Literal.scalar(10, "s32")))
    cond.root = cond.create(Opcode.COMPARE, Shape.scalar("pred"), [i, ten], attrs=Attrs(comparison_direction="LT"))
    body = Computation("body")
    b_in = param(body, 0, state)
    bi = body.create(Opcode.GET_TUPLE_ELEMENT, s32, [b_in], attrs=Attrs(tuple_index=0))
    acc = body.create(Opcode.GET_TUPLE_ELEMENT, s32, [b_in], attrs=Attrs(tuple_index=1))
    one = body.create(Opcode.CONSTANT, s32, attrs=Attrs(literal=Literal.scalar(1, "s32")))
    body.root = body.create(Opcode.TUPLE, state, [body.create(Opcode.ADD, s32, [bi, one]),
                                                  body.create(Opcode.ADD, s32, [acc, bi])])
    out = run(Opcode.WHILE, state, [(np.array(0, np.int32), np.array(0, np.int32))],
              called=[body, cond], param_shapes=[state])
    assert int(out[0]) == 10 and int(out[1]) == sum(range(10))
    branches = []
    for k in range(3):
        br = Computation(f"b{k}")
        x = param(br, 0, s32)
        br.root = br.create(Opcode.MULTIPLY, s32, [x, br.create(Opcode.CONSTANT, s32, attrs=Attrs(
            literal=Literal.scalar(k + 2, "s32")))])
        branches.append(br)
    for index, expect in [(0, 2), (1, 3), (2, 4), (7, 4), (-1, 4)]:
        args = [np.array(index, np.int32)] + [np.array(1, np.int32)] * 3
        assert int(run(Opcode.CONDITIONAL, s32, args, called=branches)) == expect
    for pred, expect in [(True, 2), (False, 3)]:
        args = [np.array(pred), np.array(1, np.int32), np.array(1, np.int32)]
        assert int(run(Opcode.CONDITIONAL, s32, args, called=branches[:2])) == expect


# ---- zero-size shapes -------------------------------------------------------------------------

def test_zero_size_shapes():
    e = np.zeros((0, 3), np.float32)
    add = scalar_comp(Opcode.ADD, np.float32)
    zero = np.array(0, np.float32)
    assert run(Opcode.BROADCAST, arr((0, 3, 2), np.float32), [e], dimensions=(0, 1)).shape == (0, 3, 2)
    assert run(Opcode.TRANSPOSE, arr((3, 0), np.float32), [e], dimensions=(1, 0)).shape == (3, 0)
    assert run(Opcode.REVERSE, arr((0, 3), np.float32), [e], dimensions=(0,)).shape == (0, 3)
    assert run(Opcode.IOTA, arr((0, 4), np.int32), [], dimensions=(0,)).shape == (0, 4)
    x = rand((4, 3))
    i0 = np.array(2, np.int32)
    assert run(Opcode.DYNAMIC_SLICE, arr((0, 3), np.float32), [x, i0, i0], dynamic_slice_sizes=(0, 3)).shape == (0, 3)
    assert np.array_equal(run(Opcode.DYNAMIC_UPDATE_SLICE, arr((4, 3), np.float32), [x, e, i0, i0]), x)
    assert run(Opcode.CONCATENATE, arr((0, 6), np.float32), [e, e], dimensions=(1,)).shape == (0, 6)
    rw = run(Opcode.REDUCE_WINDOW, arr((0, 2), np.float32), [e, zero], called=[add],
             window=Window((WindowDimension(1), WindowDimension(2))))
    assert rw.shape == (0, 2)
    out = run(Opcode.REDUCE, arr((3,), np.float32), [e, np.array(2.5, np.float32)], called=[add], dimensions=(0,))
    assert out.tolist() == [2.5] * 3
    assert run(Opcode.SORT, arr((0, 3), np.float32), [e], called=[scalar_comp(Opcode.COMPARE, np.float32,
               comparison_direction="LT")], dimensions=(1,)).shape == (0, 3)
    v, i = run(Opcode.TOPK, Shape.tuple_of([arr((0, 2), np.float32), arr((0, 2), np.int32)]), [e], k=2)
    assert v.shape == i.shape == (0, 2)
    d = run(Opcode.DOT, arr((3, 4), np.float32), [e, np.zeros((0, 4), np.float32)],
            dot_dnums=DotDimensionNumbers((0,), (0,)))
    assert d.shape == (3, 4) and not d.any()
    sas = run(Opcode.SELECT_AND_SCATTER, arr((0, 3), np.float32), [e, np.zeros((0, 3), np.float32), zero],
              called=[scalar_comp(Opcode.COMPARE, np.float32, comparison_direction="GE"), add],
              window=Window((WindowDimension(1), WindowDimension(1))))
    assert sas.shape == (0, 3)
    f = run(Opcode.FFT, arr((0, 3), np.complex64), [e.astype(np.complex64)], fft_type=0, fft_length=(3,))
    assert f.shape == (0, 3)


def test_max_min_signed_zeros():
    # XLA orders -0 < +0 in maximum/minimum; every path (reduce, window, scatter) must agree.
    x = np.array([[-0.0, 0.0, -0.0], [0.0, -0.0, -0.0], [-0.0, -0.0, -0.0]], np.float32)
    for op, want in ((Opcode.MAXIMUM, [False, False, True]), (Opcode.MINIMUM, [True, True, True])):
        comp = scalar_comp(op, np.float32)
        init = np.array(-np.inf if op == Opcode.MAXIMUM else np.inf, np.float32)
        red = run(Opcode.REDUCE, arr((3,), np.float32), [x, init], called=[comp], dimensions=(1,))
        assert np.signbit(red).tolist() == want
        win = run(Opcode.REDUCE_WINDOW, arr((3, 1), np.float32), [x, init], called=[comp],
                  window=Window((WindowDimension(1), WindowDimension(3))))
        assert np.signbit(win[:, 0]).tolist() == want
        dn = ScatterDimensionNumbers((), (0,), (0,), 1)
        sc = run(Opcode.SCATTER, arr((1,), np.float32), [init.reshape(1), np.zeros((3, 1), np.int32), x[0]],
                 called=[comp], scatter_dnums=dn)
        assert bool(np.signbit(sc[0])) == want[0]


@pytest.mark.parametrize("n", [3, 33, 128])
def test_sort_merge_path(n):
    # The comparator reads two operands in one comparison (a + b), so it has no per-operand key
    # form: the vectorized merge sort runs. Also drive merge_sort_perm directly on a key form.
    comp = Computation("sum_lt")
    f, p = Shape.scalar("f32"), Shape.scalar("pred")
    ps = [param(comp, k, f) for k in range(4)]
    lhs = comp.create(Opcode.ADD, f, [ps[0], ps[2]])
    rhs = comp.create(Opcode.ADD, f, [ps[1], ps[3]])
    comp.root = comp.create(Opcode.COMPARE, p, [lhs, rhs], attrs=Attrs(comparison_direction="LT"))
    assert comparator_keys(comp) is None
    a = RNG.integers(-3, 3, size=(2, n)).astype(np.float32)
    b = RNG.integers(-3, 3, size=(2, n)).astype(np.float32)
    shape = Shape.tuple_of([arr(a.shape, np.float32)] * 2)
    out = run(Opcode.SORT, shape, [a, b], called=[comp], dimensions=(1,), is_stable=True)
    for r in range(2):
        expect = naive_sort([a[r], b[r]], lambda x, y: x + y)
        assert np.array_equal(out[0][r], expect[0]) and np.array_equal(out[1][r], expect[1])
    lex = lex_comparator([np.float32, np.int32], ("GT", "LT"), ["TOTALORDER", "SIGNED"])
    x = RNG.choice(SPECIAL, size=(3, n)).astype(np.float32)
    y = RNG.integers(-2, 2, size=(3, n)).astype(np.int32)
    perm = merge_sort_perm(Context(evaluate_computation), lex, [x, y])
    for r in range(3):
        order = sorted(range(n), key=lambda j: (-total_key(x[r, j]), int(y[r, j])))
        assert perm[r].tolist() == order


def test_long_reduce_keeps_order_for_associative_reducers():
    # "Keep the left operand unless it is the init marker" is associative but not commutative:
    # the result must be the first element, however the reduction is grouped.
    comp = Computation("first")
    s = Shape.scalar("s32")
    a, b = param(comp, 0, s), param(comp, 1, s)
    marker = comp.create(Opcode.CONSTANT, s, attrs=Attrs(literal=Literal.scalar(-1, "s32")))
    is_init = comp.create(Opcode.COMPARE, Shape.scalar("pred"), [a, marker],
                          attrs=Attrs(comparison_direction="EQ"))
    comp.root = comp.create(Opcode.SELECT, s, [is_init, b, a])
    x = RNG.integers(0, 1000, size=(3, 301)).astype(np.int32)
    out = run(Opcode.REDUCE, arr((3,), np.int32), [x, np.array(-1, np.int32)], called=[comp], dimensions=(1,))
    assert out.tolist() == x[:, 0].tolist()


def test_lapack_custom_calls():
    a = rand((5, 5)) + 6 * np.eye(5, dtype=np.float32)
    s32, f55 = Shape.scalar("s32"), arr((5, 5), np.float32)
    lu, piv, info = run(Opcode.CUSTOM_CALL, Shape.tuple_of([f55, arr((5,), np.int32), s32]), [a],
                        custom_call_target="lapack_sgetrf_ffi", backend_config="{}")
    perm = np.arange(5)
    for j, p in enumerate(piv):  # LAPACK's 1-based row interchanges, applied in order
        perm[[j, p - 1]] = perm[[p - 1, j]]
    lower, upper = np.tril(lu, -1) + np.eye(5), np.triu(lu)
    np.testing.assert_allclose(lower @ upper, a[perm], rtol=1e-4, atol=1e-4)
    assert int(info) == 0 and np.all(np.abs(lower) <= 1 + 1e-6)  # partial pivoting
    h, tau = run(Opcode.CUSTOM_CALL, Shape.tuple_of([f55, arr((5,), np.float32)]), [a],
                 custom_call_target="lapack_sgeqrf_ffi")
    q = run(Opcode.CUSTOM_CALL, f55, [h, tau], custom_call_target="lapack_sorgqr_ffi")
    np.testing.assert_allclose(q @ np.triu(h), a, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(q.T @ q, np.eye(5), atol=1e-5)
    spd = a @ a.T
    fac, info = run(Opcode.CUSTOM_CALL, Shape.tuple_of([f55, s32]), [spd.astype(np.float32)],
                    custom_call_target="lapack_spotrf_ffi", backend_config="{uplo = 85 : ui8}")
    np.testing.assert_allclose(np.triu(fac).T @ np.triu(fac), spd, rtol=1e-4, atol=1e-3)
    assert np.array_equal(np.tril(fac, -1), np.tril(spd, -1).astype(np.float32)) and int(info) == 0
    vec, val, info = run(Opcode.CUSTOM_CALL, Shape.tuple_of([f55, arr((5,), np.float32), s32]),
                         [spd.astype(np.float32)], custom_call_target="lapack_ssyevd_ffi",
                         backend_config="{mode = 86 : ui8, uplo = 76 : ui8}")
    np.testing.assert_allclose(spd @ vec, vec * val, rtol=1e-3, atol=1e-2)
    assert np.all(np.diff(val) >= 0)
    b = rand((3, 5))
    x = run(Opcode.CUSTOM_CALL, arr((3, 5), np.float32), [a, b], custom_call_target="lapack_strsm_ffi",
            backend_config="{diag = 78 : ui8, side = 82 : ui8, trans_x = 84 : ui8, uplo = 85 : ui8}")
    np.testing.assert_allclose(x @ np.triu(a).T, b, rtol=1e-4, atol=1e-4)
