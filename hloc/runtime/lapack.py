"""jax's real-valued LAPACK custom calls on the host through LAPACK itself.

jaxlib lowers `jnp.linalg` on CPU to typed-FFI calls (`lapack_spotrf_ffi`, ...) that XLA runs
on LAPACK. The reference interpreter's versions of them (hloc/runtime/interpreter/contract.py)
are written for clarity: in f64, with Python loops over rows (an LU of order n takes n
NumPy steps, a triangular solve one per row), so a CPU bundle running them took 20 x XLA's
time on 6 x 6 matrices and far more on big ones. Here the CPU runtime calls the same
routines XLA does, from the LAPACK in numpy's bundled OpenBLAS (openblas.fortran), in the
call's own precision, one call per matrix of a batch: potrf, getrf, geqrf, orgqr, syevd,
trsm, gesdd and geev (right eigenvectors), single and double precision. Where the library or a
routine is missing, or for the complex variants, the runtime keeps the interpreter's versions.
The interpreter itself takes gesdd and geev from here: the signs of singular vectors and
eigenvectors are the routine's choice in the call's precision, which NumPy's (in f64) is not.

Results are LAPACK's, as XLA's are, with two choices kept from the interpreter so that the
two paths agree: a Cholesky factorization that fails leaves NaN in the factor's triangle and
status 1 (LAPACK: the order of the failing minor, partial factors), and the eigenvalue call
returns the input as its vectors when asked for values only.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ..ir.custom_calls import check_dims, lapack_options
from .openblas import fortran

_DTYPES = {"s": np.dtype(np.float32), "d": np.dtype(np.float64)}
_byref = ctypes.byref
_ONE = ctypes.c_size_t(1)  # the hidden length of a Fortran CHARACTER argument


def _p(array: np.ndarray) -> ctypes.c_void_p:
    """An array's address as a pointer argument (a bare int would be passed as a C int)."""
    return ctypes.c_void_p(array.ctypes.data)


def _char(c: str) -> ctypes.c_char:
    return ctypes.c_char(c.encode())


class _Bound(tuple):
    """A routine's argument tuple that keeps the arrays it points into alive."""

    arrays: list


def _args(*items, chars: int = 0) -> _Bound:
    """A routine's arguments bound once, at load time: arrays by address, ctypes scalars by
    reference, then the hidden lengths of `chars` CHARACTER arguments. Building them per
    call cost 3-4 us of the 12 us a 12 x 12 triangular solve took."""
    bound = _Bound(tuple(_p(x) if isinstance(x, np.ndarray) else _byref(x) for x in items)
                   + (_ONE,) * chars)
    bound.arrays = [x for x in items if isinstance(x, np.ndarray)]
    return bound


def _scratch(rows: int, cols: int, dtype: np.dtype) -> np.ndarray:
    """A column-major matrix the routine reads and overwrites: operands are copied in."""
    return np.zeros((max(1, rows), max(1, cols)), dtype, order="F")


def _batches(shape) -> list[tuple[int, ...]]:
    return list(np.ndindex(*shape))


# Each maker reads the call's options and shapes once, at load time, binds the routine's
# arguments to scratch arrays, and returns the run: run(operand values) -> the results, as
# the interpreter's implementation returns them.

def _potrf(routine, dtype, instr):
    fn, it = routine
    lower = lapack_options(instr).get("uplo", "L") == "L"
    shape = instr.operands[0].shape.dims
    n = shape[-1]
    keep = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    status_dims = instr.shape.tuple_shapes[1].dims
    m, info = _scratch(n, n, dtype), it(0)
    args = _args(_char("L" if lower else "U"), it(n), m, it(max(1, n)), info, chars=1)
    view = m[:n, :n]
    batches = _batches(shape[:-2])

    def run(ops):
        (a,) = ops
        out = np.empty(shape, dtype)
        status = np.zeros(shape[:-2], np.int32)
        for idx in batches:
            view[...] = a[idx]
            fn(*args)
            if info.value != 0:
                view[keep] = np.nan
                status[idx] = 1
            out[idx] = view
        return out, status.reshape(status_dims)
    return run


def _getrf(routine, dtype, instr):
    fn, it = routine
    shape = instr.operands[0].shape.dims
    _, piv_shape, info_shape = instr.shape.tuple_shapes
    rows, cols = shape[-2:]
    k = min(rows, cols)
    ipiv = np.zeros(max(1, k), np.dtype(it))
    m, info = _scratch(rows, cols, dtype), it(0)
    args = _args(it(rows), it(cols), m, it(max(1, rows)), ipiv, info)
    view = m[:rows, :cols]
    batches = _batches(shape[:-2])

    def run(ops):
        (a,) = ops
        out = np.empty(shape, dtype)
        pivots = np.zeros(shape[:-2] + (k,), np.int32)
        infos = np.zeros(shape[:-2], np.int32)
        for idx in batches:
            view[...] = a[idx]
            fn(*args)
            out[idx], infos[idx] = view, info.value
            pivots[idx] = ipiv[:k]
        return out, pivots.reshape(piv_shape.dims), infos.reshape(info_shape.dims)
    return run


def _with_workspace(fn, it, items: list, work_at: int, dtype, chars: int = 0) -> _Bound:
    """`items` (the routine's arguments, None at `work_at` and `work_at` + 1: the workspace
    and its length) bound with the workspace a query (lwork = -1) asks for."""
    probe = list(items)
    probe[work_at], probe[work_at + 1] = np.zeros(1, dtype), it(-1)
    fn(*_args(*probe, chars=chars))
    size = max(1, int(probe[work_at][0]))
    bound = list(items)
    bound[work_at], bound[work_at + 1] = np.zeros(size, dtype), it(size)
    return _args(*bound, chars=chars)


def _geqrf(routine, dtype, instr):
    fn, it = routine
    shape = instr.operands[0].shape.dims
    rows, cols = shape[-2:]
    k = min(rows, cols)
    tau = np.zeros(max(1, k), dtype)
    tau_dtype = instr.shape.tuple_shapes[1].np_dtype
    m = _scratch(rows, cols, dtype)
    args = _with_workspace(fn, it, [it(rows), it(cols), m, it(max(1, rows)), tau, None, None,
                                    it(0)], 5, dtype)
    view = m[:rows, :cols]
    batches = _batches(shape[:-2])

    def run(ops):
        (a,) = ops
        out = np.empty(shape, dtype)
        taus = np.zeros(shape[:-2] + (k,), dtype)
        for idx in batches:
            view[...] = a[idx]
            fn(*args)
            out[idx], taus[idx] = view, tau[:k]
        return out, taus.astype(tau_dtype)
    return run


def _orgqr(routine, dtype, instr):
    fn, it = routine
    shape = instr.operands[0].shape.dims
    rows, cols = shape[-2:]
    k = instr.operands[1].shape.dims[-1]
    m, t = _scratch(rows, cols, dtype), np.zeros(max(1, k), dtype)
    args = _with_workspace(fn, it, [it(rows), it(cols), it(k), m, it(max(1, rows)), t, None,
                                    None, it(0)], 6, dtype)
    view = m[:rows, :cols]
    batches = _batches(shape[:-2])

    def run(ops):
        a, tau = ops
        out = np.empty(shape, dtype)
        for idx in batches:
            view[...] = a[idx]
            t[:k] = np.asarray(tau[idx]).reshape(-1)
            fn(*args)
            out[idx] = view
        return out
    return run


def _syevd(routine, dtype, instr):
    fn, it = routine
    o = lapack_options(instr)
    vectors_too = o.get("mode", "V") == "V"
    vec_shape, val_shape, info_shape = instr.shape.tuple_shapes
    shape = instr.operands[0].shape.dims
    n = shape[-1]
    w, m, info = np.zeros(max(1, n), dtype), _scratch(n, n, dtype), it(0)
    head = [_char("V" if vectors_too else "N"), _char(o.get("uplo", "L")), it(n), m,
            it(max(1, n)), w]
    work, iwork = np.zeros(1, dtype), np.zeros(1, np.dtype(it))
    fn(*_args(*head, work, it(-1), iwork, it(-1), info, chars=2))
    work = np.zeros(max(1, int(work[0])), dtype)
    iwork = np.zeros(max(1, int(iwork[0])), np.dtype(it))
    args = _args(*head, work, it(len(work)), iwork, it(len(iwork)), info, chars=2)
    view = m[:n, :n]
    batches = _batches(shape[:-2])

    def run(ops):
        (a,) = ops
        vectors = np.empty(shape, dtype)
        values = np.empty(shape[:-1], dtype)
        infos = np.zeros(shape[:-2], np.int32)
        for idx in batches:
            view[...] = a[idx]
            fn(*args)
            vectors[idx], values[idx], infos[idx] = view, w[:n], info.value
        if not vectors_too:
            vectors = np.array(a, dtype)
        return (vectors.astype(vec_shape.np_dtype), values.astype(val_shape.np_dtype),
                infos.reshape(info_shape.dims))
    return run


def _trsm(routine, dtype, instr):
    fn, it = routine
    o = lapack_options(instr)
    a_dims, b_dims = instr.operands[0].shape.dims, instr.operands[1].shape.dims
    rows, cols = b_dims[-2:]
    batch = tuple(np.broadcast_shapes(a_dims[:-2], b_dims[:-2]))
    trans = {"N": "N", "T": "T", "C": "T"}[o.get("trans_x", "N")]  # real: C is T
    chars = [_char(c) for c in ("L" if o.get("side", "L") == "L" else "R", o.get("uplo", "L"),
                                trans, o.get("diag", "N"))]
    alpha = (ctypes.c_double if dtype == np.float64 else ctypes.c_float)(1.0)
    t, x = _scratch(*a_dims[-2:], dtype), _scratch(rows, cols, dtype)
    args = _args(*chars, it(rows), it(cols), alpha, t, it(max(1, a_dims[-1])), x,
                 it(max(1, rows)), chars=4)
    t_view, x_view = t[:a_dims[-2], :a_dims[-1]], x[:rows, :cols]
    out_dtype = instr.shape.np_dtype
    batches = _batches(batch)
    same_batch = tuple(a_dims[:-2]) == batch == tuple(b_dims[:-2])

    def run(ops):
        a, b = ops
        if not same_batch:
            a = np.broadcast_to(a, batch + tuple(a_dims[-2:]))
            b = np.broadcast_to(b, batch + (rows, cols))
        out = np.empty(batch + (rows, cols), dtype)
        for idx in batches:
            t_view[...], x_view[...] = a[idx], b[idx]
            fn(*args)
            out[idx] = x_view
        return out.astype(out_dtype, copy=False)
    return run


def _gesdd(routine, dtype, instr):
    fn, it = routine
    mode = lapack_options(instr).get("mode", "A")
    if mode not in "ASN":
        return None
    _, s_shape, u_shape, vt_shape, info_shape = instr.shape.tuple_shapes
    shape = instr.operands[0].shape.dims
    rows, cols = shape[-2:]
    ucols = u_shape.dims[-1] if mode != "N" else 1
    vrows = vt_shape.dims[-2] if mode != "N" else 1
    s = np.zeros(max(1, min(rows, cols)), dtype)
    u = np.zeros((max(1, rows), ucols), dtype, order="F")
    vt = np.zeros((max(1, vrows), max(1, cols)), dtype, order="F")
    iwork = np.zeros(max(1, 8 * min(rows, cols)), np.dtype(it))
    m, info = _scratch(rows, cols, dtype), it(0)
    args = _with_workspace(fn, it, [_char(mode), it(rows), it(cols), m, it(max(1, rows)), s, u,
                                    it(max(1, rows)), vt, it(max(1, vrows)), None, None,
                                    iwork, info], 10, dtype, chars=1)
    view = m[:rows, :cols]
    batches = _batches(shape[:-2])
    k = min(rows, cols)

    def run(ops):
        (a,) = ops
        sv = np.zeros(s_shape.dims, dtype)
        us, vts = np.zeros(u_shape.dims, dtype), np.zeros(vt_shape.dims, dtype)
        infos = np.zeros(shape[:-2], np.int32)
        for idx in batches:
            view[...] = a[idx]
            if not np.isfinite(view).all():  # LAPACK may not return on NaN: as a failure
                sv[idx], us[idx], vts[idx], infos[idx] = np.nan, np.nan, np.nan, 1
                continue
            fn(*args)
            sv[idx], infos[idx] = s[:k], info.value
            if mode != "N":
                us[idx], vts[idx] = u[:rows, :ucols], vt[:vrows, :cols]
        return np.array(a), sv, us, vts, infos.reshape(info_shape.dims)
    return run


def _geev(routine, dtype, instr):
    fn, it = routine
    o = lapack_options(instr)
    if o.get("compute_left", "N") == "V":
        return None
    right = o.get("compute_right", "N") == "V"
    wr_shape, wi_shape, vl_shape, vr_shape, info_shape = instr.shape.tuple_shapes
    shape = instr.operands[0].shape.dims
    n = shape[-1]
    wr, wi = np.zeros(max(1, n), dtype), np.zeros(max(1, n), dtype)
    vl = np.zeros((1, 1), dtype, order="F")
    vr = np.zeros((max(1, n), max(1, n)), dtype, order="F")
    m, info = _scratch(n, n, dtype), it(0)
    args = _with_workspace(fn, it, [_char("N"), _char("V" if right else "N"), it(n), m,
                                    it(max(1, n)), wr, wi, vl, it(1), vr, it(max(1, n)), None,
                                    None, info], 11, dtype, chars=2)
    view = m[:n, :n]
    batches = _batches(shape[:-2])

    def run(ops):
        (a,) = ops
        wrs, wis = np.zeros(wr_shape.dims, dtype), np.zeros(wi_shape.dims, dtype)
        vls, vrs = np.zeros(vl_shape.dims, vl_shape.np_dtype), np.zeros(vr_shape.dims, vr_shape.np_dtype)
        infos = np.zeros(shape[:-2], np.int32)
        for idx in batches:
            view[...] = a[idx]
            if not np.isfinite(view).all():  # jax's kernel skips the call: status -4
                wrs[idx], wis[idx], vrs[idx], infos[idx] = np.nan, np.nan, np.nan, -4
                continue
            fn(*args)
            wrs[idx], wis[idx], infos[idx] = wr[:n], wi[:n], info.value
            if right and info.value == 0:
                vrs[idx] = _unpack_pairs(vr[:n, :n], wi[:n])
        return wrs, wis, vls, vrs, infos.reshape(info_shape.dims)
    return run


def _unpack_pairs(packed: np.ndarray, imag: np.ndarray) -> np.ndarray:
    """LAPACK's real eigenvectors as complex columns: a complex pair's vectors are stored as
    its real and imaginary parts in two columns (jax unpacks them so)."""
    out = packed.astype(np.complex128)
    j = 0
    while j < len(imag):
        if imag[j] == 0 or np.isnan(imag[j]) or j + 1 == len(imag):
            j += 1
            continue
        out[:, j] = packed[:, j] + 1j * packed[:, j + 1]
        out[:, j + 1] = packed[:, j] - 1j * packed[:, j + 1]
        j += 2
    return out


def _on_one_thread_if_small(run, instr):
    """LAPACK's BLAS calls split even a 32 x 32 eigendecomposition across OpenBLAS' threads,
    which hand work over by spinning: with another process on the cores, such a call took
    15 ms instead of 0.1. Calls of fewer than blas.SINGLE_THREAD_FLOPS (about n^3 per
    matrix) run on the calling thread, as small products do."""
    from .cpu.blas import single_threaded

    dims = instr.operands[0].shape.dims
    n = max(dims[-2:], default=1)
    return single_threaded(run, math.prod(dims[:-2]) * n ** 3)


_IMPLS = {"potrf": _potrf, "getrf": _getrf, "geqrf": _geqrf, "orgqr": _orgqr,
          "syevd": _syevd, "trsm": _trsm, "gesdd": _gesdd, "geev": _geev}


def native_impl(instr):
    """An implementation (the interpreter's signature: impl(ctx, instr, operand values)) of
    custom call `instr` on LAPACK, or None: not one of these calls, a complex variant, or no
    such routine in the library."""
    target = getattr(instr.attrs, "custom_call_target", None) or ""
    if not (target.startswith("lapack_") and target.endswith("_ffi")):
        return None
    name = target[len("lapack_"):-len("_ffi")]
    dtype, kind = _DTYPES.get(name[:1]), _IMPLS.get(name[1:])
    if dtype is None or kind is None:
        return None
    routine = fortran(name)
    if routine is None:
        return None
    if any(op.shape.is_array and op.shape.np_dtype != dtype for op in instr.operands[:2]):
        return None
    check_dims(instr)  # the scratch arrays are sized from the operands: results must fit

    run = kind(routine, dtype, instr)
    if run is None:  # an option this path does not take
        return None
    run = _on_one_thread_if_small(run, instr)

    def impl(_ctx, _instr, ops):
        return run(ops)
    return impl
