"""jax's LAPACK custom calls on LAPACK itself (hloc/runtime/lapack.py) against the
reference interpreter's versions, call by call, options and batches included, and in a
compiled bundle of the `linalg` sample against XLA's outputs."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from hloc.errors import InputError, UnsupportedError
from hloc.ir import Attrs, Computation, Layout, Opcode, Shape
from hloc.ir.custom_calls import lapack_config
from hloc.runtime import lapack
from hloc.runtime.cpu import hostops
from hloc.runtime.interpreter import evaluate_computation
from hloc.runtime.openblas import fortran
from tests.conftest import SAMPLES, sample_arrays
from tests.test_interp_structural import arr

from .support.bundles import kernels_json, load_cpu, sample_bundle
from .support.values import assert_close

pytestmark = [pytest.mark.cpu,
              pytest.mark.skipif(fortran("spotrf") is None,
                                 reason="numpy's OpenBLAS has no LAPACK here")]
RNG = np.random.default_rng(7)
S32 = Shape.scalar("s32")


def _custom_call(target, out_shape, operands, config="{}", column_major=False):
    """A computation of one custom call `target` on parameters shaped like `operands` (in
    the layout whose matrices are column-major, if `column_major`; the values still come as
    NumPy arrays: the layout decides only how the call copies them to LAPACK)."""
    comp = Computation("entry")
    params = [comp.create(Opcode.PARAMETER, _laid_out(arr(a.shape, a.dtype), column_major),
                          attrs=Attrs(parameter_number=i)) for i, a in enumerate(operands)]
    comp.root = comp.create(Opcode.CUSTOM_CALL, out_shape, params,
                            attrs=Attrs(custom_call_target=target, backend_config=config))
    return comp


def _laid_out(shape: Shape, column_major: bool) -> Shape:
    if not column_major or shape.rank < 2:
        return shape.with_layout(Layout.row_major(shape.rank))
    return shape.with_layout(Layout((shape.rank - 2, shape.rank - 1,
                                     *range(shape.rank - 3, -1, -1))))


def both(target, out_shape, operands, config="{}", column_major=False):
    """(the native result, the interpreter's) of custom call `target` on `operands`; where
    the call also runs as a native job (runtime/cpu/hostops.py), the job's results must be
    the NumPy step's, bit for bit."""
    comp = _custom_call(target, out_shape, operands, config, column_major)
    impl = lapack.native_impl(comp.root)
    assert impl is not None, target
    got = impl(None, comp.root, operands)
    if lapack.native_call(comp.root) is not None:
        assert_same_bits(job_results(comp.root, operands), got)
    return got, evaluate_computation(comp, list(operands))


def job_results(instr, operands):
    """The results of `instr`'s native job over copies of `operands` (outputs prefilled
    with garbage, so that anything the job leaves unwritten shows)."""
    shapes = instr.shape.tuple_shapes if instr.shape.is_tuple else [instr.shape]
    outs = [np.full(s.dims, 77, s.np_dtype) for s in shapes]
    ops = [np.array(o) for o in operands]
    job = hostops.lapack_job(lapack.native_call(instr), [hostops.array_place(o) for o in ops],
                             [hostops.array_place(o) for o in outs])
    assert job is not None, instr.attrs.custom_call_target
    job.run()
    return tuple(outs) if instr.shape.is_tuple else outs[0]


def assert_same_bits(got, want) -> None:
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_array_equal(g, w)  # NaN where NaN: bit for bit for these results


def spd(batch, n, dtype):
    a = RNG.standard_normal(batch + (n, n)).astype(dtype)
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=dtype)).astype(dtype)


def tol(dtype) -> dict:
    return dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("p,dtype", [("s", np.float32), ("d", np.float64)])
@pytest.mark.parametrize("batch", [(), (2, 3)])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("column_major", [False, True], ids=["row-major", "column-major"])
def test_potrf(p, dtype, batch, uplo, column_major):
    """Row-major matrices are factored as their transposes' other triangle (no transposing
    copy): the same factor, the same untouched triangle."""
    a = spd(batch, 6, dtype)
    a[..., 0, 5] = a[..., 5, 0] = 0.25  # the triangle LAPACK must leave alone
    a[..., 5, 0] += 1.0 if uplo == "L" else 0.0
    out = Shape.tuple_of([arr(a.shape, dtype), arr(batch, np.int32)])
    (fac, ok), (ref, ref_ok) = both(f"lapack_{p}potrf_ffi", out, [a], lapack_config(uplo=uplo),
                                    column_major)
    assert_close(fac, ref, **tol(dtype))
    assert fac.dtype == dtype and np.array_equal(ok, ref_ok) and not ok.any()
    other = np.triu(np.ones((6, 6), bool), 1) if uplo == "L" else np.tril(np.ones((6, 6), bool), -1)
    assert np.array_equal(fac[..., other], a[..., other])  # untouched, as LAPACK leaves it


def test_potrf_of_a_matrix_that_is_not_positive_definite_is_nan_and_status_1():
    a = spd((2,), 4, np.float32)
    a[1, 2, 2] = -50.0
    out = Shape.tuple_of([arr(a.shape, np.float32), arr((2,), np.int32)])
    (fac, ok), (ref, ref_ok) = both("lapack_spotrf_ffi", out, [a], lapack_config(uplo="L"))
    assert ok.tolist() == ref_ok.tolist() == [0, 1]
    np.testing.assert_array_equal(np.isnan(fac), np.isnan(ref))
    assert np.isnan(fac[1][np.tril(np.ones((4, 4), bool))]).all() and not np.isnan(fac[0]).any()


@pytest.mark.parametrize("p,dtype", [("s", np.float32), ("d", np.float64)])
# (37, 45): the job's transposing copies in blocks of 16 (codegen/cpu/hostops.py), with
# partial blocks on both sides.
@pytest.mark.parametrize("dims", [(5, 5), (3, 6, 4), (2, 4, 7), (37, 45)])
def test_getrf(p, dtype, dims):
    a = RNG.standard_normal(dims).astype(dtype)
    k = min(dims[-2:])
    out = Shape.tuple_of([arr(dims, dtype), arr(dims[:-2] + (k,), np.int32),
                          arr(dims[:-2], np.int32)])
    (lu, piv, info), (ref, ref_piv, ref_info) = both(f"lapack_{p}getrf_ffi", out, [a])
    assert_close(lu, ref, **tol(dtype))
    assert np.array_equal(piv, ref_piv) and np.array_equal(info, ref_info)
    assert piv.min() >= 1  # 1-based, as LAPACK's


def test_getrf_of_a_singular_matrix_reports_the_zero_pivot():
    a = RNG.standard_normal((4, 4)).astype(np.float32)
    a[:, 2] = 0
    out = Shape.tuple_of([arr((4, 4), np.float32), arr((4,), np.int32), S32])
    (_, _, info), (_, _, ref_info) = both("lapack_sgetrf_ffi", out, [a])
    assert int(info) == int(ref_info) == 3


@pytest.mark.parametrize("p,dtype", [("s", np.float32), ("d", np.float64)])
@pytest.mark.parametrize("dims", [(5, 5), (2, 6, 4), (4, 3)])
def test_geqrf_and_orgqr(p, dtype, dims):
    a = RNG.standard_normal(dims).astype(dtype)
    k = min(dims[-2:])
    out = Shape.tuple_of([arr(dims, dtype), arr(dims[:-2] + (k,), dtype)])
    (h, tau), (ref, ref_tau) = both(f"lapack_{p}geqrf_ffi", out, [a])
    assert_close(h, ref, **tol(dtype))
    assert_close(tau, ref_tau, **tol(dtype))
    q, ref_q = both(f"lapack_{p}orgqr_ffi", arr(dims, dtype), [h, tau])
    assert_close(q, ref_q, **tol(dtype))


@pytest.mark.parametrize("p,dtype", [("s", np.float32), ("d", np.float64)])
@pytest.mark.parametrize("mode", ["V", "N"])
def test_syevd(p, dtype, mode):
    a = spd((3,), 5, dtype)
    out = Shape.tuple_of([arr(a.shape, dtype), arr((3, 5), dtype), arr((3,), np.int32)])
    (vec, val, info), (ref_vec, ref_val, ref_info) = both(
        f"lapack_{p}syevd_ffi", out, [a], lapack_config(mode=mode, uplo="L"))
    assert_close(val, ref_val, **tol(dtype))
    assert np.array_equal(info, ref_info)
    if mode == "V":  # each vector up to its sign
        overlap = np.abs(np.einsum("bij,bij->bj", vec, ref_vec))
        assert_close(overlap, np.ones_like(overlap), **tol(dtype))
    else:
        np.testing.assert_array_equal(vec, ref_vec)


@pytest.mark.parametrize("p,dtype", [("s", np.float32), ("d", np.float64)])
@pytest.mark.parametrize("side,uplo,trans,diag",
                         list(itertools.product("LR", "LU", "NTC", "NU")))
@pytest.mark.parametrize("column_major", [False, True], ids=["row-major", "column-major"])
def test_trsm(p, dtype, side, uplo, trans, diag, column_major):
    """Row-major operands are handed to LAPACK as their transposes (the other triangle, the
    other side, the other transposition): the same solution."""
    n = 5 if side == "L" else 3
    a = (RNG.standard_normal((2, n, n)) + 4 * np.eye(n)).astype(dtype)
    b = RNG.standard_normal((5, 3)).astype(dtype)  # broadcast over a's batch
    x, ref = both(f"lapack_{p}trsm_ffi", arr((2, 5, 3), dtype), [a, b],
                  lapack_config(side=side, uplo=uplo, trans_x=trans, diag=diag), column_major)
    assert_close(x, ref, **tol(dtype))


def test_complex_and_unknown_calls_stay_with_the_interpreter(monkeypatch):
    comp = Computation("entry")
    x = comp.create(Opcode.PARAMETER, arr((2, 2), np.complex64), attrs=Attrs(parameter_number=0))
    for target in ("lapack_cpotrf_ffi", "lapack_sgesdd_ffi", "my_call"):
        call = comp.create(Opcode.CUSTOM_CALL, arr((2, 2), np.complex64), [x],
                           attrs=Attrs(custom_call_target=target))
        assert lapack.native_impl(call) is None
    monkeypatch.setattr(lapack, "fortran", lambda name: None)  # no LAPACK in the library
    y = comp.create(Opcode.PARAMETER, arr((2, 2), np.float32), attrs=Attrs(parameter_number=1))
    call = comp.create(Opcode.CUSTOM_CALL, Shape.tuple_of([arr((2, 2), np.float32), S32]), [y],
                       attrs=Attrs(custom_call_target="lapack_spotrf_ffi"))
    assert lapack.native_impl(call) is None


def test_the_linalg_sample_runs_its_lapack_calls_on_lapack(tmp_path, monkeypatch):
    """The compiled sample (LU, QR, Cholesky, eigh, triangular solves) through the CPU
    runtime: every LAPACK call a native job, except the small triangular solves and the
    Cholesky factorization, which are kernels (codegen/cpu/trsm.py, potrf.py); the outputs
    XLA's."""
    made = []
    real = hostops.thunk_job
    monkeypatch.setattr(hostops, "thunk_job", lambda ctx, t: made.append(real(ctx, t)) or made[-1])
    bundle = sample_bundle(SAMPLES / "linalg.pb", tmp_path / "linalg.bundle")
    exe = load_cpu(bundle)
    args, expected = sample_arrays("linalg", "inputs"), sample_arrays("linalg", "expected")
    assert_close(exe.run(args), expected, rtol=1e-4, atol=1e-4)
    native = [m for m in made if m is not None]
    assert len(native) == 3, made  # getrf, geqrf, syevd
    kernels = kernels_json(bundle)["kernels"]
    assert sorted(k for k, v in kernels.items() if v["segments"] == ["trsm"]) == [
        "triangular_solve.3", "triangular_solve.6", "triangular_solve.7"]
    assert [v["segments"] for k, v in kernels.items() if k.startswith("cholesky")] == [["potrf"]]



@pytest.mark.parametrize("p,dtype", [("s", np.float32), ("d", np.float64)])
@pytest.mark.parametrize("mode", ["A", "S", "N"])
@pytest.mark.parametrize("rows,cols", [(7, 4), (3, 5)])
def test_gesdd(p, dtype, mode, rows, cols):
    """LAPACK's SVD (the interpreter calls the same routine): singular values as NumPy's,
    vectors orthonormal and reconstructing the matrix; a NaN matrix fails with status 1."""
    a = RNG.standard_normal((2, rows, cols)).astype(dtype)
    a[1, 0, 0] = np.nan
    k = min(rows, cols)
    ucols, vrows = {"A": (rows, cols), "S": (k, k), "N": (rows, cols)}[mode]
    out = Shape.tuple_of([arr((2, rows, cols), dtype), arr((2, k), dtype),
                       arr((2, rows, ucols), dtype), arr((2, vrows, cols), dtype),
                       Shape.array("s32", (2,))])
    comp = _custom_call(f"lapack_{p}gesdd_ffi", out, [a], lapack_config(mode=mode))
    _, s, u, vt, info = lapack.native_impl(comp.root)(None, comp.root, [a])
    assert list(info) == [0, 1] and np.isnan(s[1]).all()
    assert_close(s[0], np.linalg.svd(a[0].astype(np.float64), compute_uv=False).astype(dtype),
                 **tol(dtype))
    if mode != "N":
        assert_close((u[0][:, :k] * s[0]) @ vt[0][:k], a[0], **tol(dtype))
        assert_close(u[0].T @ u[0], np.eye(ucols, dtype=dtype), **tol(dtype))
    got = evaluate_computation(comp, [a])
    assert all(np.array_equal(g, w, equal_nan=True) for g, w in zip(got[1:], (s, u, vt, info), strict=True))


@pytest.mark.parametrize("p,dtype", [("s", np.float32), ("d", np.float64)])
def test_geev_right_vectors_and_complex_pairs(p, dtype):
    """Eigenvalues (a complex pair included) and unpacked right eigenvectors: A v = w v; an
    inf in the matrix gives status -4 and NaN, as jax's kernel."""
    g = np.array([[[2.0, -1.0, 0.5], [1.0, 2.0, 0.0], [0.0, 0.4, 3.0]]] * 2, dtype)
    g[1, 2, 2] = np.inf
    c = np.complex64 if dtype == np.float32 else np.complex128
    out = Shape.tuple_of([arr((2, 3), dtype), arr((2, 3), dtype), arr((2, 3, 3), c),
                       arr((2, 3, 3), c), Shape.array("s32", (2,))])
    comp = _custom_call(f"lapack_{p}geev_ffi", out, [g],
                        lapack_config(compute_left="N", compute_right="V"))
    wr, wi, _, vr, info = lapack.native_impl(comp.root)(None, comp.root, [g])
    assert list(info) == [0, -4] and np.isnan(wr[1]).all()
    w = wr[0] + 1j * wi[0]
    assert sorted(np.round(wi[0], 3)) != [0, 0, 0]  # a complex pair
    np.testing.assert_allclose(g[0] @ vr[0], vr[0] * w, **tol(dtype))
    assert_close(np.linalg.norm(vr[0], axis=0), np.ones(3, dtype), **tol(dtype))
    left = _custom_call(f"lapack_{p}geev_ffi", out, [g],
                        lapack_config(compute_left="V", compute_right="N"))
    assert lapack.native_impl(left.root) is None
    with pytest.raises(UnsupportedError, match="left eigenvectors"):
        evaluate_computation(left, [g])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gtsv_solves_with_row_interchanges_and_reports_a_zero_pivot(dtype):
    """The interpreter's gtsv (LAPACK's steps) against a dense solve, with a diagonal entry
    smaller than the one below it (a row interchange); a singular system gives the row of
    its zero pivot, as LAPACK's status."""
    n, k = 7, 3
    dl, d, du = (RNG.standard_normal((2, n)).astype(dtype) for _ in range(3))
    d += 3
    d[:, 2] = 0.01
    dl[:, 0] = du[:, -1] = 0
    b = RNG.standard_normal((2, n, k)).astype(dtype)
    d[1], dl[1], du[1] = 0, 0, 0  # singular: the first pivot is zero
    out = Shape.tuple_of([arr(x.shape, dtype) for x in (dl, d, du, b)] + [Shape.array("s32", (2,))])
    comp = _custom_call("lapack_{}gtsv_ffi".format("s" if dtype == np.float32 else "d"), out,
                        [dl, d, du, b])
    *_, x, info = evaluate_computation(comp, [dl, d, du, b])
    assert list(info) == [0, 1]
    dense = np.diag(d[0]) + np.diag(dl[0, 1:], -1) + np.diag(du[0, :-1], 1)
    assert_close(x[0], np.linalg.solve(dense.astype(np.float64), b[0]).astype(dtype), **tol(dtype))


@pytest.mark.parametrize("target,opts,results", [
    ("lapack_sgesdd_ffi", dict(mode="A"), [(4, 3), (3,), (4, 3), (3, 3), ()]),  # U must be 4x4
    ("lapack_sgesdd_ffi", dict(mode="S"), [(4, 3), (3,), (4, 3), (3, 9), ()]),
    ("lapack_sgeev_ffi", dict(compute_left="N", compute_right="V"),
     [(4,), (4,), (4, 4), (4, 2), ()]),
])
def test_result_shapes_that_do_not_fit_the_call_are_refused(target, opts, results):
    """LAPACK writes its results through raw pointers: a module whose result shapes are not
    the ones the operands and options imply is refused before any call, on both paths."""
    a = RNG.standard_normal((4, 4 if "geev" in target else 3)).astype(np.float32)
    types = ["f32", "f32", "c64" if "geev" in target else "f32",
             "c64" if "geev" in target else "f32", "s32"]
    out = Shape.tuple_of([Shape.array(t, d) for t, d in zip(types, results, strict=True)])
    comp = _custom_call(target, out, [a], lapack_config(**opts))
    with pytest.raises(InputError, match="cannot have results"):
        lapack.native_impl(comp.root)
    with pytest.raises(InputError, match="cannot have results"):
        evaluate_computation(comp, [a])


@pytest.mark.parametrize("n,single", [(16, True), (256, True), (640, False)])
def test_small_calls_run_on_one_blas_thread(n, single, monkeypatch):
    """A small factorization keeps LAPACK's BLAS calls on the calling thread (OpenBLAS' pool
    made a 32 x 32 eigh take 15 ms instead of 0.1, and a 200 x 200 Cholesky up to 400 ms
    instead of 0.2, while other processes held the cores); a big one keeps the pool."""
    from hloc.runtime.cpu import blas

    if blas._setter() is None:
        pytest.skip("numpy's OpenBLAS has no thread-local setter here")
    calls = []
    real = blas._setter()
    monkeypatch.setattr(blas, "_setter", lambda: lambda k: calls.append(k) or real(k))
    a = spd((), n, np.float32)
    out = Shape.tuple_of([arr((n, n), np.float32), S32])
    impl = lapack.native_impl(_custom_call("lapack_spotrf_ffi", out, [a]).root)
    factor, status = impl(None, None, [a])
    assert int(status) == 0 and np.allclose(np.tril(factor) @ np.tril(factor).T, a, rtol=1e-3, atol=1e-2)
    assert (calls[:1] == [1]) == single, calls


def test_lapack_calls_in_loops_run_inside_the_loops_native_drivers(tmp_path):
    """The linalg_in_loop sample: every LAPACK call of its scan and fori_loop runs inside a
    native driver (the loops never return to Python), as a ["host", thunk] slot or, for the
    small triangular solves and Cholesky factorizations, a kernel slot; the outputs are
    XLA's, and bit for bit those of the same thunks stepped one by one."""
    from hloc.bundle.reader import read_bundle

    path = sample_bundle(SAMPLES / "ops/linalg_in_loop.pb", tmp_path / "loop.bundle")
    kernels = json.loads(bytes(read_bundle(path).members["kernels.json"]))
    slots = [tuple(slot) for d in kernels["drivers"] for slot in d["slots"]]
    solves = {name for name, k in kernels["kernels"].items()
              if k["segments"] in (["trsm"], ["potrf"])}
    exe = load_cpu(path)
    calls = [t.name for t in exe.program.walk() if t.kind == "custom-call"]
    assert len(calls) >= 11 and len(solves) == 7  # the sample's 11, inlined
    assert sorted(calls) == sorted([v for kind, v in slots if kind == "host"] + sorted(solves))
    assert all(("buffers", name) in slots for name in solves)
    assert "host:custom-call" not in exe.describe()["steps"], exe.describe()
    args = sample_arrays("ops/linalg_in_loop", "inputs")
    got = exe.run(args)
    assert_close(got, sample_arrays("ops/linalg_in_loop", "expected"), rtol=1e-4, atol=1e-5)
    stepped = exe.run_wrapped(args, lambda step, runner: runner)
    for a, b in zip(got, stepped, strict=True):
        np.testing.assert_array_equal(a, b)


def test_big_batches_run_in_ranges_on_the_pool(tmp_path, monkeypatch):
    """A batch of LAPACK calls with enough work (64 QRs of 96 x 32) runs as one job per
    range of matrices, each with scratch of its own, on the pool's threads (outside native
    drivers); the results are bit for bit those of the calls one after another."""
    from hloc.runtime.cpu import blas, parallel

    from .support.bundles import compile_bundle

    if blas._setter() is None:
        pytest.skip("numpy's OpenBLAS has no thread-local setter here: batches stay whole")

    text = """HloModule q
ENTRY e {
  a = f32[64,96,32]{2,1,0} parameter(0)
  ROOT q = (f32[64,96,32]{2,1,0}, f32[64,32]{1,0}) custom-call(a), custom_call_target="lapack_sgeqrf_ffi", output_to_operand_aliasing={{0}: (0, {})}, api_version=API_VERSION_TYPED_FFI
}
"""
    src = tmp_path / "q.hlo"
    src.write_text(text)
    bundle = compile_bundle(src, tmp_path / "q.bundle")
    assert not kernels_json(bundle)["drivers"]
    threads = parallel.Pool(2)
    monkeypatch.setattr(parallel, "pool", lambda: threads)
    made = []
    real = hostops.split_thunk_jobs
    monkeypatch.setattr(hostops, "split_thunk_jobs",
                        lambda ctx, t, parts: made.append(real(ctx, t, parts)) or made[-1])
    exe = load_cpu(bundle)
    assert len(made) == 1 and len(made[0]) == 3
    a = RNG.standard_normal((64, 96, 32)).astype(np.float32)
    got = exe.run([a])
    want = lapack.native_call(exe.module.entry.root).run([a])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
