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

potrf, getrf, geqrf, orgqr, syevd and trsm are described as data (Call): the CPU runtime
runs them as native jobs built from that description (runtime/cpu/hostops.py: about 0.3 us
for a 4 x 4 LU, where the NumPy step took 13 us, and native drivers call them inside loops);
Call.run, the NumPy executor of the same description, serves tests and any call a job
cannot express. gesdd and geev keep NumPy steps (a NaN check before the call, eigenvector
pairs unpacked after it).

Results are LAPACK's, as XLA's are, with two choices kept from the interpreter so that the
two paths agree: a Cholesky factorization that fails leaves NaN in the factor's triangle and
status 1 (LAPACK: the order of the failing minor, partial factors), and the eigenvalue call
returns the input as its vectors when asked for values only.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..ir.custom_calls import check_dims, lapack_flops, lapack_options
from .layouts import memory_order
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
    """A routine's argument tuple that keeps the arrays it points into alive; `words` are
    the same arguments as 64-bit words (addresses, and the hidden lengths by value) for
    native code (runtime/cpu/hostops.py)."""

    arrays: list
    words: tuple[int, ...]


def _word(item) -> int:
    if isinstance(item, np.ndarray):
        return item.ctypes.data
    return ctypes.addressof(item)


def _args(*items, chars: int = 0) -> _Bound:
    """A routine's arguments bound once, at load time: arrays by address, ctypes scalars by
    reference, then the hidden lengths of `chars` CHARACTER arguments. Building them per
    call cost 3-4 us of the 12 us a 12 x 12 triangular solve took."""
    bound = _Bound(tuple(_p(x) if isinstance(x, np.ndarray) else _byref(x) for x in items)
                   + (_ONE,) * chars)
    bound.arrays = [x for x in items if isinstance(x, np.ndarray)]
    bound.words = tuple(_word(x) for x in items) + (_ONE.value,) * chars
    return bound


def _scratch(rows: int, cols: int, dtype: np.dtype, transposed: bool = False) -> np.ndarray:
    """A column-major matrix the routine reads and overwrites: operands are copied in. A
    `transposed` one is row-major: the routine sees its transpose."""
    return np.zeros((max(1, rows), max(1, cols)), dtype, order="C" if transposed else "F")


def _batches(shape) -> list[tuple[int, ...]]:
    return list(np.ndindex(*shape))


class Call:
    """One routine call per matrix of a batch, described as data so that two executors run
    it alike: `run` here (NumPy copies around a ctypes call) and the native job
    runtime/cpu/hostops.py builds from it (copies and the call in generated code).

    Per matrix: each operand's matrix is copied into its scratch view (`ins`: operand
    index, view; an operand with fewer batch dimensions is broadcast), the routine runs,
    `nan_if_failed` (a view, lower) gets NaN in that triangle when the status word is
    nonzero, and each output's matrix is copied from its source (`outs`: source, output
    index, nonzero): a scratch view or small array, or an operand index (the operand
    itself); `nonzero` writes 1 where the source is nonzero instead of its value."""

    def __init__(self, routine, instr, batch, args: _Bound, info: np.ndarray | None = None):
        self.fn = routine[0]
        self.instr, self.batch, self.args, self.info = instr, tuple(batch), args, info
        self.ins: list[tuple[int, np.ndarray]] = []
        self.outs: list[tuple[np.ndarray | int, int, bool]] = []
        self.nan_if_failed: tuple[np.ndarray, bool] | None = None

    @property
    def info_view(self) -> np.ndarray:
        """The status word as a 0-d array (an output source)."""
        return self.info.reshape(())

    def output_shapes(self) -> list:
        shape = self.instr.shape
        return list(shape.tuple_shapes) if shape.is_tuple else [shape]

    def per_matrix(self, source, ops_shapes) -> tuple[int, ...]:
        if isinstance(source, int):
            return tuple(ops_shapes[source][len(ops_shapes[source]) - 2:])
        return source.shape

    def run(self, ops):
        ops_shapes = [op.shape for op in ops]
        batch, sources = self.batch, {o: src for src, o, _ in self.outs}
        outs = [np.zeros(batch + self.per_matrix(sources[o], ops_shapes), shape.np_dtype)
                for o, shape in enumerate(self.output_shapes())]
        operands = {k: np.broadcast_to(ops[k], batch + ops[k].shape[ops[k].ndim - view.ndim:])
                    for k, view in self.ins}
        for idx in _batches(batch):
            for k, view in self.ins:
                view[...] = operands[k][idx]
            self.fn(*self.args)
            failed = self.info is not None and self.info[0] != 0
            if self.nan_if_failed is not None and failed:
                view, lower = self.nan_if_failed
                view[(np.tril_indices if lower else np.triu_indices)(view.shape[0])] = np.nan
            for src, o, nonzero in self.outs:
                value = ops[src][idx] if isinstance(src, int) else src
                outs[o][idx] = (value != 0) if nonzero else value
        results = tuple(out.reshape(shape.dims)
                        for out, shape in zip(outs, self.output_shapes(), strict=True))
        return results if self.instr.shape.is_tuple else results[0]


# Each maker reads the call's options and shapes once, at load time, binds the routine's
# arguments to scratch arrays, and returns the Call (or None: an option this path does not
# take).

def _potrf(routine, dtype, instr):
    """A row-major matrix is copied as it lies and factored as its transpose's other
    triangle (which holds the same elements): the factor lands in the asked-for triangle
    of the logical matrix, the rest of the copy untouched, as in the column-major call."""
    fn, it = routine
    lower = lapack_options(instr).get("uplo", "L") == "L"
    shape = instr.operands[0].shape.dims
    n = shape[-1]
    flip = _row_major_matrix(instr.operands[0].shape)
    m, info = _scratch(n, n, dtype, transposed=flip), np.zeros(1, np.dtype(it))
    call = Call(routine, instr, shape[:-2],
                _args(_char("L" if lower != flip else "U"), it(n), m, it(max(1, n)), info,
                      chars=1),
                info)
    view = m[:n, :n]
    call.ins = [(0, view)]
    call.nan_if_failed = (view, lower)
    call.outs = [(view, 0, False), (call.info_view, 1, True)]
    return call


def _getrf(routine, dtype, instr):
    fn, it = routine
    shape = instr.operands[0].shape.dims
    rows, cols = shape[-2:]
    k = min(rows, cols)
    ipiv = np.zeros(max(1, k), np.dtype(it))
    m, info = _scratch(rows, cols, dtype), np.zeros(1, np.dtype(it))
    call = Call(routine, instr, shape[:-2],
                _args(it(rows), it(cols), m, it(max(1, rows)), ipiv, info), info)
    view = m[:rows, :cols]
    call.ins = [(0, view)]
    call.outs = [(view, 0, False), (ipiv[:k], 1, False), (call.info_view, 2, False)]
    return call


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
    m = _scratch(rows, cols, dtype)
    call = Call(routine, instr, shape[:-2], _with_workspace(
        fn, it, [it(rows), it(cols), m, it(max(1, rows)), tau, None, None, it(0)], 5, dtype))
    view = m[:rows, :cols]
    call.ins = [(0, view)]
    call.outs = [(view, 0, False), (tau[:k], 1, False)]
    return call


def _orgqr(routine, dtype, instr):
    fn, it = routine
    shape = instr.operands[0].shape.dims
    rows, cols = shape[-2:]
    k = instr.operands[1].shape.dims[-1]
    m, t = _scratch(rows, cols, dtype), np.zeros(max(1, k), dtype)
    call = Call(routine, instr, shape[:-2], _with_workspace(
        fn, it, [it(rows), it(cols), it(k), m, it(max(1, rows)), t, None, None, it(0)], 6,
        dtype))
    view = m[:rows, :cols]
    call.ins = [(0, view), (1, t[:k])]
    call.outs = [(view, 0, False)]
    return call


def _syevd(routine, dtype, instr):
    fn, it = routine
    o = lapack_options(instr)
    vectors_too = o.get("mode", "V") == "V"
    shape = instr.operands[0].shape.dims
    n = shape[-1]
    w, m, info = np.zeros(max(1, n), dtype), _scratch(n, n, dtype), np.zeros(1, np.dtype(it))
    head = [_char("V" if vectors_too else "N"), _char(o.get("uplo", "L")), it(n), m,
            it(max(1, n)), w]
    work, iwork = np.zeros(1, dtype), np.zeros(1, np.dtype(it))
    fn(*_args(*head, work, it(-1), iwork, it(-1), info, chars=2))
    work = np.zeros(max(1, int(work[0])), dtype)
    iwork = np.zeros(max(1, int(iwork[0])), np.dtype(it))
    call = Call(routine, instr, shape[:-2],
                _args(*head, work, it(len(work)), iwork, it(len(iwork)), info, chars=2), info)
    view = m[:n, :n]
    call.ins = [(0, view)]
    call.outs = [(view if vectors_too else 0, 0, False), (w[:n], 1, False),
                 (call.info_view, 2, False)]
    return call


def _trsm(routine, dtype, instr):
    """A matrix whose minor dimension is its last is copied as it lies (a plain copy) and
    handed to LAPACK as its transpose (column-major): `a` read that way has the other
    triangle and the other transposition, `b` the other side, and the solve is the same.
    Copying a row-major 512 x 512 triangle into column-major order took 0.58 ms, eight times
    the solve of one right-hand side against it."""
    fn, it = routine
    o = lapack_options(instr)
    a_shape, b_shape = instr.operands[0].shape, instr.operands[1].shape
    a_dims, b_dims = a_shape.dims, b_shape.dims
    rows, cols = b_dims[-2:]
    batch = tuple(np.broadcast_shapes(a_dims[:-2], b_dims[:-2]))
    fa, fb = _row_major_matrix(a_shape), _row_major_matrix(b_shape)
    left = o.get("side", "L") == "L"
    lower = o.get("uplo", "L") == "L"
    transposed = o.get("trans_x", "N") in ("T", "C")  # real: C is T
    # LAPACK sees a^T where fa, x^T where fb: x^T op(a)^T = b^T is the other side's solve.
    chars = [_char(c) for c in ("L" if left != fb else "R", "L" if lower != fa else "U",
                                "T" if transposed ^ fa ^ fb else "N", o.get("diag", "N"))]
    alpha = (ctypes.c_double if dtype == np.float64 else ctypes.c_float)(1.0)
    t = _scratch(*a_dims[-2:], dtype, transposed=fa)
    x = _scratch(rows, cols, dtype, transposed=fb)
    m, n = (cols, rows) if fb else (rows, cols)
    call = Call(routine, instr, batch, _args(*chars, it(m), it(n), alpha, t,
                                             it(max(1, a_dims[-1])), x, it(max(1, m)),
                                             chars=4))
    x_view = x[:rows, :cols]
    call.ins = [(0, t[:a_dims[-2], :a_dims[-1]]), (1, x_view)]
    call.outs = [(x_view, 0, False)]
    return call


def _row_major_matrix(shape) -> bool:
    """Whether the shape's last dimension is its minor one (its matrices row-major)."""
    return shape.rank >= 2 and memory_order(shape)[-1] == shape.rank - 1 and shape.dims[-1] > 1


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
    15 ms instead of 0.1. Calls of fewer than blas.LAPACK_SINGLE_THREAD_FLOPS (about n^3
    per matrix: up to 512 x 512) run on the calling thread."""
    from .cpu.blas import LAPACK_SINGLE_THREAD_FLOPS, single_threaded

    return single_threaded(run, lapack_flops(instr), LAPACK_SINGLE_THREAD_FLOPS)


_IMPLS = {"potrf": _potrf, "getrf": _getrf, "geqrf": _geqrf, "orgqr": _orgqr,
          "syevd": _syevd, "trsm": _trsm, "gesdd": _gesdd, "geev": _geev}


def _made(instr):
    """The maker's result for custom call `instr` (a Call, or gesdd's and geev's run
    functions), or None: not one of these calls, a complex variant, an option this path does
    not take, or no such routine in the library."""
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
    return kind(routine, dtype, instr)


def native_call(instr) -> Call | None:
    """Custom call `instr` as a Call (potrf, getrf, geqrf, orgqr, syevd, trsm), or None."""
    made = _made(instr)
    return made if isinstance(made, Call) else None


def native_impl(instr):
    """An implementation (the interpreter's signature: impl(ctx, instr, operand values)) of
    custom call `instr` on LAPACK, or None (see _made)."""
    made = _made(instr)
    if made is None:
        return None
    run = _on_one_thread_if_small(made.run if isinstance(made, Call) else made, instr)

    def impl(_ctx, _instr, ops):
        return run(ops)
    return impl
