"""Contractions and linear algebra: dot, convolution, fft, triangular-solve, cholesky.

Precision follows XLA's CPU backend: f32 and narrower floats (bf16, f16, f8) are computed in f32
and rounded once to the result type; f64 in f64; integers with wrap-around (computed in 64 bits,
which gives the same residues); pred contractions are "any(a and b)".
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedError
from ...ir import Opcode, TriangularSolveOptions, Window, WindowDimension
from ...ir.custom_calls import check_dims, lapack_options, lapack_targets
from . import fftn
from .control import custom_call_target
from .reduce import dilate_and_pad
from .registry import impl


def compute_dtype(*dtypes: np.dtype) -> np.dtype:
    """The dtype a contraction over `dtypes` (operands and result) is carried out in."""
    kinds = {d.kind for d in dtypes}
    if "c" in kinds:
        return np.dtype(np.complex128 if any(d == np.complex128 for d in dtypes) else np.complex64)
    if any(d.kind == "f" and d.itemsize == 8 for d in dtypes):
        return np.dtype(np.float64)
    if kinds <= {"i", "u", "b"}:
        return np.dtype(np.uint64 if "u" in kinds and "i" not in kinds else np.int64)
    return np.dtype(np.float32)


def _finish(value: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
    if out_dtype == np.bool_:
        return value != 0
    if out_dtype.kind in "iu" or (out_dtype.kind == "V" and "int" in out_dtype.name):
        # Integer results wrap: go through a 64-bit two's complement view.
        return value.astype(np.int64 if value.dtype.kind != "u" else np.uint64).astype(out_dtype)
    return value.astype(out_dtype)


@impl(Opcode.DOT)
def dot(ctx, instr, ops):
    lhs, rhs = ops
    dn = instr.attrs.dot_dnums
    out_dtype = instr.shape.np_dtype
    cdt = compute_dtype(lhs.dtype, rhs.dtype, out_dtype)
    lb, lc = list(dn.lhs_batch_dimensions), list(dn.lhs_contracting_dimensions)
    rb, rc = list(dn.rhs_batch_dimensions), list(dn.rhs_contracting_dimensions)
    lf = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    batch = [lhs.shape[d] for d in lb]
    m = math.prod(lhs.shape[d] for d in lf)
    n = math.prod(rhs.shape[d] for d in rf)
    k = math.prod(lhs.shape[d] for d in lc)
    # Row-major copies whatever the operands' memory order: BLAS sums in an order that
    # depends on the strides it is given, and the same dot must give the same bits on an
    # arena view with a column-major layout (a LAPACK operand's) as on a fresh array.
    a = np.transpose(lhs, lb + lf + lc).astype(cdt, order="C").reshape(math.prod(batch), m, k)
    b = np.transpose(rhs, rb + rc + rf).astype(cdt, order="C").reshape(math.prod(batch), k, n)
    with np.errstate(all="ignore"):
        out = np.matmul(a, b)
    return _finish(out, out_dtype).reshape(instr.shape.dims)


# ---- convolution -----------------------------------------------------------------------------

@impl(Opcode.CONVOLUTION)
def convolution(ctx, instr, ops):
    lhs, rhs = ops
    dn = instr.attrs.conv_dnums
    out_dtype = instr.shape.np_dtype
    cdt = compute_dtype(lhs.dtype, rhs.dtype, out_dtype)
    window = instr.attrs.window
    x = np.transpose(lhs, [dn.input_batch_dimension, dn.input_feature_dimension,
                           *dn.input_spatial_dimensions]).astype(cdt)
    w = np.transpose(rhs, [dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
                           *dn.kernel_spatial_dimensions]).astype(cdt)
    reversed_axes = tuple(2 + i for i, wd in enumerate(window.dims) if wd.window_reversal)
    if reversed_axes:
        w = np.flip(w, reversed_axes)
    out_perm = [dn.output_batch_dimension, dn.output_feature_dimension, *dn.output_spatial_dimensions]
    out_spatial = [instr.shape.dims[d] for d in dn.output_spatial_dimensions]
    out = _conv_nchw(x, w, window, out_spatial, instr.attrs.feature_group_count or 1,
                     instr.attrs.batch_group_count or 1)
    return _finish(np.transpose(out, np.argsort(out_perm)), out_dtype)


def _patches(x: np.ndarray, window: Window, out_spatial: list[int]) -> np.ndarray:
    """(N, C, *out_spatial, *kernel): the input element under every kernel tap of every output."""
    trivial = WindowDimension(size=1)
    xp, _ = dilate_and_pad(x, Window((trivial, trivial) + tuple(window.dims)), np.zeros((), x.dtype))
    spans = [(w.size - 1) * w.window_dilation + 1 for w in window.dims]
    ns = len(spans)
    kernel = tuple(w.size for w in window.dims)
    if 0 in out_spatial or any(p < s for p, s in zip(xp.shape[2:], spans, strict=False)):
        return np.zeros(x.shape[:2] + tuple(out_spatial) + kernel, x.dtype)
    view = np.lib.stride_tricks.sliding_window_view(xp, spans, axis=tuple(range(2, 2 + ns)))
    sel = (slice(None), slice(None)) + tuple(slice(0, o * w.stride, w.stride)
                                             for o, w in zip(out_spatial, window.dims, strict=False))
    sel += tuple(slice(None, None, w.window_dilation) for w in window.dims)
    return view[sel]


def _conv_nchw(x, w, window, out_spatial, groups, batch_groups):
    """Grouped convolution as one batched matmul of patches (im2col) by the kernel."""
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    nb, og = n // batch_groups, o // (groups * batch_groups)
    ns = len(out_spatial)
    p = _patches(x, window, out_spatial)
    po, pk = math.prod(out_spatial), math.prod(w.shape[2:])
    # (BG, Nb, G, Cg, *O, *K) -> (BG, G, Nb * O, Cg * K)
    p = p.reshape((batch_groups, nb, groups, cg) + p.shape[2:])
    spatial = list(range(4, 4 + ns))
    kernel = list(range(4 + ns, 4 + 2 * ns))
    p = np.transpose(p, [0, 2, 1] + spatial + [3] + kernel).reshape(batch_groups, groups, nb * po, cg * pk)
    k = w.reshape((batch_groups, groups, og, cg * pk)).transpose(0, 1, 3, 2)
    with np.errstate(all="ignore"):
        out = np.matmul(p, k)  # (BG, G, Nb*O, Og)
    out = out.reshape((batch_groups, groups, nb) + tuple(out_spatial) + (og,))
    out = np.transpose(out, [2, 0, 1, 3 + ns] + list(range(3, 3 + ns)))
    return out.reshape((nb, o) + tuple(out_spatial))


# ---- fft -------------------------------------------------------------------------------------

@impl(Opcode.FFT)
def fft(ctx, instr, ops):
    (x,) = ops
    lengths = tuple(instr.attrs.fft_length)
    kind = instr.attrs.fft_type or 0
    if 0 in instr.shape.dims or 0 in x.shape:
        return np.zeros(instr.shape.dims, instr.shape.np_dtype)
    out = fftn.transform(kind, x, lengths)
    return out.astype(instr.shape.np_dtype, copy=False)


# ---- linear algebra --------------------------------------------------------------------------

def _wide(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.complex128 if dtype.kind == "c" else np.float64)


def _substitute(m: np.ndarray, b: np.ndarray, lower: bool) -> np.ndarray:
    """Solve m @ x = b for triangular m by substitution (batched over leading dims). The
    operands are made row-major first: einsum's sums run in an order that depends on the
    strides, and an arena view with a column-major layout must give a fresh array's bits."""
    m, b = np.ascontiguousarray(m), np.ascontiguousarray(b)
    size = m.shape[-1]
    x = np.zeros(np.broadcast_shapes(m.shape[:-2], b.shape[:-2]) + b.shape[-2:], b.dtype)
    rows = range(size) if lower else range(size - 1, -1, -1)
    with np.errstate(all="ignore"):
        for i in rows:
            done = slice(0, i) if lower else slice(i + 1, size)
            acc = b[..., i, :] - np.einsum("...k,...kn->...n", m[..., i, done], x[..., done, :])
            x[..., i, :] = acc / m[..., i, i][..., None]
    return x


def solve_triangular(a, b, opt: TriangularSolveOptions, out_dtype) -> np.ndarray:
    """op(a) @ x = b (left_side) or x @ op(a) = b, reading only a's `lower`/upper triangle."""
    wide = _wide(a.dtype)
    a, b = a.astype(wide), b.astype(wide)
    tri = np.tril(a) if opt.lower else np.triu(a)
    if opt.unit_diagonal:
        idx = np.arange(a.shape[-1])
        tri[..., idx, idx] = 1
    lower = opt.lower
    if opt.transpose_a in (2, 3):
        tri = np.swapaxes(tri, -1, -2)
        tri = np.conj(tri) if opt.transpose_a == 3 else tri
        lower = not lower
    if opt.left_side:
        x = _substitute(tri, b, lower)
    else:
        # x @ t = b  <=>  t^T @ x^T = b^T
        x = np.swapaxes(_substitute(np.swapaxes(tri, -1, -2), np.swapaxes(b, -1, -2), not lower), -1, -2)
    return x.astype(out_dtype)


@impl(Opcode.TRIANGULAR_SOLVE)
def triangular_solve(ctx, instr, ops):
    a, b = ops
    return solve_triangular(a, b, instr.attrs.triangular_solve_options, instr.shape.np_dtype)


@impl(Opcode.CHOLESKY)
def cholesky(ctx, instr, ops):
    (a,) = ops
    lower = instr.attrs.cholesky_options.lower if instr.attrs.cholesky_options else False
    wide = a.astype(_wide(a.dtype))
    tri = wide if lower else np.conj(np.swapaxes(wide, -1, -2))
    low = np.tril(tri)
    herm = low + np.conj(np.swapaxes(np.tril(tri, -1), -1, -2))
    out, _ = cholesky_lower(herm)
    if not lower:
        out = np.conj(np.swapaxes(out, -1, -2))
    return out.astype(instr.shape.np_dtype)


def cholesky_lower(herm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Batched lower Cholesky factors (NaN where not positive definite) and per-matrix ok flags."""
    flat = herm.reshape((-1,) + herm.shape[-2:])
    out = np.empty_like(flat)
    ok = np.ones(len(flat), bool)
    for i, mat in enumerate(flat):
        try:
            out[i] = np.linalg.cholesky(mat)
        except np.linalg.LinAlgError:
            out[i], ok[i] = np.nan, False
    return out.reshape(herm.shape), ok.reshape(herm.shape[:-2])


# ---- jax's LAPACK custom calls (CPU) ---------------------------------------------------------
# jaxlib lowers jnp.linalg on CPU to typed-FFI LAPACK calls; their options are single ASCII
# characters stored as ui8 in an MLIR dictionary backend_config, e.g. {uplo = 76 : ui8}.

def _status(shape, ok) -> np.ndarray:
    return np.where(np.asarray(ok), 0, 1).astype(np.int32).reshape(shape.dims)


@custom_call_target(*lapack_targets("potrf", "s", "d", "c", "z"))
def lapack_potrf(ctx, instr, ops):
    (a,) = ops
    lower = lapack_options(instr).get("uplo", "L") == "L"
    wide = a.astype(_wide(a.dtype))
    tri = wide if lower else np.conj(np.swapaxes(wide, -1, -2))
    herm = np.tril(tri) + np.conj(np.swapaxes(np.tril(tri, -1), -1, -2))
    factor, ok = cholesky_lower(herm)
    if not lower:
        factor = np.conj(np.swapaxes(factor, -1, -2))
    # LAPACK leaves the other triangle as it was.
    keep = np.tril(np.ones(a.shape[-2:], bool)) if lower else np.triu(np.ones(a.shape[-2:], bool))
    out = np.where(keep, factor, wide).astype(a.dtype)
    return out, _status(instr.shape.tuple_shapes[1], ok)


@custom_call_target(*lapack_targets("trsm", "s", "d", "c", "z"))
def lapack_trsm(ctx, instr, ops):
    a, b = ops[0], ops[1]
    o = lapack_options(instr)
    opt = TriangularSolveOptions(left_side=o.get("side", "L") == "L", lower=o.get("uplo", "L") == "L",
                                 unit_diagonal=o.get("diag", "N") == "U",
                                 transpose_a={"N": 1, "T": 2, "C": 3}[o.get("trans_x", "N")])
    return solve_triangular(a, b, opt, instr.shape.np_dtype)


def _lu(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Right-looking LU with partial pivoting (LAPACK getrf): packed LU, 1-based pivots, info."""
    m, n = a.shape
    a = a.copy()
    k = min(m, n)
    pivots = np.zeros(k, np.int32)
    info = 0
    with np.errstate(all="ignore"):
        for j in range(k):
            p = j + int(np.argmax(np.abs(a[j:, j])))
            pivots[j] = p + 1
            a[[j, p]] = a[[p, j]]
            if a[j, j] == 0:
                info = info or j + 1
                continue
            a[j + 1:, j] /= a[j, j]
            a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
    return a, pivots, info


@custom_call_target(*lapack_targets("getrf", "s", "d", "c", "z"))
def lapack_getrf(ctx, instr, ops):
    (a,) = ops
    lu_shape, piv_shape, info_shape = instr.shape.tuple_shapes
    flat = a.astype(_wide(a.dtype)).reshape((-1,) + a.shape[-2:])
    results = [_lu(m) for m in flat]
    lu = np.stack([r[0] for r in results]) if results else flat
    piv = np.stack([r[1] for r in results]) if results else np.zeros((0,) + piv_shape.dims[-1:])
    info = np.array([r[2] for r in results], np.int32)
    return (lu.astype(a.dtype).reshape(a.shape), piv.astype(np.int32).reshape(piv_shape.dims),
            info.reshape(info_shape.dims))


@custom_call_target(*lapack_targets("geqrf", "s", "d", "c", "z"))
def lapack_geqrf(ctx, instr, ops):
    (a,) = ops
    h, tau = np.linalg.qr(a.astype(_wide(a.dtype)), mode="raw")
    return np.swapaxes(h, -1, -2).astype(a.dtype), tau.astype(instr.shape.tuple_shapes[1].np_dtype)


@custom_call_target(*lapack_targets("orgqr", "s", "d"), *lapack_targets("ungqr", "c", "z"))
def lapack_orgqr(ctx, instr, ops):
    a, tau = ops
    m, n = a.shape[-2:]
    flat = a.astype(_wide(a.dtype)).reshape((-1, m, n))
    taus = tau.astype(flat.dtype).reshape((len(flat), -1))
    q = np.zeros_like(flat)
    for b in range(len(flat)):
        # Q = H_0 H_1 ... H_{k-1} applied to the first n columns of the identity.
        qb = np.eye(m, n, dtype=flat.dtype)
        for j in reversed(range(taus.shape[1])):
            v = np.concatenate([[1], flat[b, j + 1:, j]])
            qb[j:] -= taus[b, j] * np.outer(v, np.conj(v) @ qb[j:])
        q[b] = qb
    return q.reshape(a.shape).astype(a.dtype)


@custom_call_target(*lapack_targets("syevd", "s", "d"), *lapack_targets("heevd", "c", "z"))
def lapack_syevd(ctx, instr, ops):
    (a,) = ops
    o = lapack_options(instr)
    vec_shape, val_shape, info_shape = instr.shape.tuple_shapes
    w, v = np.linalg.eigh(a.astype(_wide(a.dtype)), UPLO=o.get("uplo", "L"))
    vectors = v.astype(a.dtype) if o.get("mode", "V") == "V" else a
    return vectors, w.astype(val_shape.np_dtype), np.zeros(info_shape.dims, np.int32)


def _matrices(batch: tuple[int, ...]):
    return list(np.ndindex(*batch))


def _on_lapack(ctx, instr, ops):
    """The call on LAPACK itself (numpy's bundled OpenBLAS, as the CPU runtime runs it), or
    None. Singular vectors and eigenvectors are unique only up to sign (phase), which the
    routine picks in the call's own precision: NumPy's versions, in f64, pick others."""
    from ..lapack import native_impl

    run = native_impl(instr)
    return None if run is None else run(ctx, instr, ops)


@custom_call_target(*lapack_targets("gesdd", "s", "d", "c", "z"))
def lapack_gesdd(ctx, instr, ops):
    """Singular values (and vectors: mode 'A' all of U and V^T, 'S' the first min(m, n), 'N'
    none): LAPACK's gesdd where it is there (_on_lapack), else NumPy's in f64. A matrix that
    fails (no convergence, a NaN) gets NaN and status 1; the overwritten input and the vectors
    of mode 'N' are unspecified in LAPACK: here the input and zeros."""
    check_dims(instr)
    native = _on_lapack(ctx, instr, ops)
    if native is not None:
        return native
    (a,) = ops
    mode = lapack_options(instr).get("mode", "A")
    if mode not in "ASN":
        raise UnsupportedError(f"{instr.attrs.custom_call_target}: mode '{mode}'")
    _, s_shape, u_shape, vt_shape, info_shape = instr.shape.tuple_shapes
    wide = a.astype(_wide(a.dtype))
    s = np.zeros(s_shape.dims, _wide(s_shape.np_dtype))
    u, vt = np.zeros(u_shape.dims, wide.dtype), np.zeros(vt_shape.dims, wide.dtype)
    info = np.zeros(a.shape[:-2], np.int32)
    for idx in _matrices(a.shape[:-2]):
        try:
            if mode == "N":
                s[idx] = np.linalg.svd(wide[idx], compute_uv=False)
            else:
                u[idx], s[idx], vt[idx] = np.linalg.svd(wide[idx], full_matrices=mode == "A")
        except np.linalg.LinAlgError:
            s[idx], u[idx], vt[idx], info[idx] = np.nan, np.nan, np.nan, 1
    return (a, s.astype(s_shape.np_dtype), u.astype(u_shape.np_dtype),
            vt.astype(vt_shape.np_dtype), info.reshape(info_shape.dims))


@custom_call_target(*lapack_targets("geev", "s", "d", "c", "z"))
def lapack_geev(ctx, instr, ops):
    """Eigenvalues and right eigenvectors of a general matrix: LAPACK's geev where it is there
    (_on_lapack), else NumPy's in f64 (unit norm, largest component real; a real matrix's
    complex pairs as conjugate columns, as jax unpacks them). A matrix with an inf or NaN gets
    status -4 and NaN, as jax's kernel skips it. Left eigenvectors are not implemented."""
    check_dims(instr)
    native = _on_lapack(ctx, instr, ops)
    if native is not None:
        return native
    (a,) = ops
    o = lapack_options(instr)
    target = instr.attrs.custom_call_target
    if o.get("compute_left", "N") == "V":
        raise UnsupportedError(f"{target}: left eigenvectors (compute_left='V')")
    shapes = instr.shape.tuple_shapes
    real = len(shapes) == 5
    n = a.shape[-1]
    w = np.zeros(a.shape[:-1], np.complex128)
    vr = np.zeros(a.shape, np.complex128)
    info = np.zeros(a.shape[:-2], np.int32)
    wide = a.astype(_wide(a.dtype))
    for idx in _matrices(a.shape[:-2]):
        if not np.isfinite(wide[idx]).all():
            w[idx], vr[idx], info[idx] = np.nan, np.nan, -4
            continue
        try:
            w[idx], vr[idx] = np.linalg.eig(wide[idx]) if n else (w[idx], vr[idx])
        except np.linalg.LinAlgError:
            w[idx], vr[idx], info[idx] = np.nan, np.nan, 1
    vl_shape, vr_shape, info_shape = shapes[-3:]
    vectors = (np.zeros(vl_shape.dims, vl_shape.np_dtype), vr.astype(vr_shape.np_dtype),
               info.reshape(info_shape.dims))
    if real:
        values = (w.real.astype(shapes[0].np_dtype), w.imag.astype(shapes[1].np_dtype))
    else:
        values = (w.astype(shapes[0].np_dtype),)
    return (*values, *vectors)


def _gtsv(dl: np.ndarray, d: np.ndarray, du: np.ndarray, b: np.ndarray) -> int:
    """LAPACK gtsv in place (jax's operands: dl[0] and du[-1] unused): Gaussian elimination
    with partial pivoting, row by row, then back substitution. Afterwards d and du hold U's
    diagonal and first superdiagonal, dl[1:] its second; the status is the 1-based row of a
    zero pivot (0: solved). Complex pivots compare |re| + |im|, as LAPACK's CABS1."""
    n = len(d)
    low = dl[1:]  # LAPACK's DL(1..n-1)
    size = (lambda z: abs(z.real) + abs(z.imag)) if d.dtype.kind == "c" else abs
    for i in range(n - 1):
        if size(d[i]) >= size(low[i]):
            if d[i] == 0:
                return i + 1
            fact = low[i] / d[i]
            d[i + 1] -= fact * du[i]
            b[i + 1] -= fact * b[i]
            if i < n - 2:
                low[i] = 0
        else:
            fact = d[i] / low[i]
            d[i] = low[i]
            temp = d[i + 1]
            d[i + 1] = du[i] - fact * temp
            if i < n - 2:
                low[i] = du[i + 1]
                du[i + 1] = -fact * low[i]
            du[i] = temp
            b[i], b[i + 1] = b[i + 1].copy(), b[i] - fact * b[i + 1]
    if n and d[n - 1] == 0:
        return n
    if n:
        b[n - 1] /= d[n - 1]
    if n > 1:
        b[n - 2] = (b[n - 2] - du[n - 2] * b[n - 1]) / d[n - 2]
    for i in range(n - 3, -1, -1):
        b[i] = (b[i] - du[i] * b[i + 1] - low[i] * b[i + 2]) / d[i]
    return 0


@custom_call_target(*lapack_targets("gtsv", "s", "d", "c", "z"))
def lapack_gtsv(ctx, instr, ops):
    """A tridiagonal system per matrix of the batch (dl, d, du: [..., n]; b: [..., n, k]) by
    LAPACK's gtsv steps in the call's precision; results (dl, d, du, x, status) as LAPACK
    leaves them."""
    check_dims(instr)
    dl, d, du, b = (np.array(x) for x in ops)
    info = np.zeros(d.shape[:-1], np.int32)
    with np.errstate(all="ignore"):
        for idx in _matrices(d.shape[:-1]):
            info[idx] = _gtsv(dl[idx], d[idx], du[idx], b[idx])
    return dl, d, du, b, info.reshape(instr.shape.tuple_shapes[4].dims)
