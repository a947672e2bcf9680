"""Native FFT kernels (elemental/dft.py; cpu/fft.py, cuda/fft.py) against the reference
interpreter (numpy's fftn family) and XLA's outputs: every fft_type, 1-3 transformed dims,
odd and even lengths, length 1, batch dimensions, c64 and c128, empty shapes; big transforms
keep their numpy (CPU) or host (CUDA) path."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.codegen.elemental.dft import twiddle_values
from hloc.frontend import load
from tests.conftest import SAMPLES, require_samples, sample_arrays, sample_meta
from tests.test_interp_samples import mismatch

from .support.bundles import compile_bundle, kernels_json, load_cpu, variants
from .support.run import emulate_hlo, interpret

pytestmark = pytest.mark.cpu

KINDS = ("FFT", "IFFT", "RFFT", "IRFFT")
REAL = {"c64": "f32", "c128": "f64"}
NUMPY = {"c64": np.complex64, "c128": np.complex128, "f32": np.float32, "f64": np.float64}
# (batch dims, fft_length): 1-3 dims, odd/even, length 1 and 2, with and without batch.
SHAPES = [((), (1,)), ((3,), (8,)), ((2, 3), (5,)), ((4,), (2,)), ((2,), (4, 6)),
          ((), (3, 5, 2)), ((2,), (1, 7, 4)), ((3,), (6, 1))]


def _dims(kind: str, batch, lengths):
    """(operand dims, result dims) of an fft."""
    half = lengths[:-1] + (lengths[-1] // 2 + 1,)
    if kind == "RFFT":
        return batch + lengths, batch + half
    if kind == "IRFFT":
        return batch + half, batch + lengths
    return batch + lengths, batch + lengths


def _types(kind: str, ct: str) -> tuple[str, str]:
    return {"RFFT": (REAL[ct], ct), "IRFFT": (ct, REAL[ct])}.get(kind, (ct, ct))


def module_text(kind: str, ct: str, shapes) -> str:
    """One fft per (batch, lengths), each on its own parameter, results in a tuple."""
    it, ot = _types(kind, ct)
    params, lines, outs = [], [], []
    for k, (batch, lengths) in enumerate(shapes):
        ind, outd = _dims(kind, batch, lengths)
        x = f"{it}[{','.join(map(str, ind))}]"
        y = f"{ot}[{','.join(map(str, outd))}]"
        params.append(f"p{k}: {x}")
        lines += [f"  %p{k} = {x} parameter({k})",
                  f"  %f{k} = {y} fft(%p{k}), fft_type={kind}, "
                  f"fft_length={{{','.join(map(str, lengths))}}}"]
        outs.append(y)
    root = f"({', '.join(outs)})"
    lines.append(f"  ROOT %t = {root} tuple({', '.join(f'%f{k}' for k in range(len(shapes)))})")
    return (f"HloModule fft_{kind}\n\nENTRY %main ({', '.join(params)}) -> {root} {{\n"
            + "\n".join(lines) + "\n}\n")


def random_inputs(kind: str, ct: str, shapes, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    it, _ = _types(kind, ct)
    out = []
    for batch, lengths in shapes:
        dims = _dims(kind, batch, lengths)[0]
        x = rng.standard_normal(dims)
        if it.startswith("c"):  # not Hermitian: IRFFT must drop what numpy drops
            x = x + 1j * rng.standard_normal(dims)
        out.append(x.astype(NUMPY[it]))
    return out


def assert_close(got, want, ct: str) -> None:
    """Errors relative to each result's largest magnitude (DFT errors scale with it)."""
    tol = 2e-6 if ct == "c64" else 1e-13
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (i, g.shape, w.shape, g.dtype, w.dtype)
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=0, atol=tol * scale, err_msg=f"out{i}")


# ---- the DFT math ------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 12, 30, 64, 97])
def test_twiddles_are_accurate_and_quarter_turns_exact(n):
    values = np.array(twiddle_values(n)).reshape(n, 2)
    # The oracle in extended precision where the platform has it (x86: 64-bit mantissa).
    wide = np.finfo(np.longdouble).eps < np.finfo(np.float64).eps
    pi = np.longdouble("3.14159265358979323846264338327950288")
    angles = 2 * pi * np.arange(n, dtype=np.longdouble) / n
    atol = 1.2e-16 if wide else 5e-16  # within about an ulp of the true value
    np.testing.assert_allclose(values[:, 0], np.cos(angles).astype(np.float64), rtol=0, atol=atol)
    np.testing.assert_allclose(values[:, 1], np.sin(angles).astype(np.float64), rtol=0, atol=atol)
    for j in range(n):
        if (4 * j) % n == 0:
            assert tuple(values[j]) == [(1, 0), (0, 1), (-1, 0), (0, -1)][4 * j // n]


# ---- CPU ---------------------------------------------------------------------------------------

def _fft_kernels(bundle) -> list[dict]:
    return [k for k in kernels_json(bundle)["kernels"].values() if "fft" in k["segments"]]


@pytest.mark.parametrize("ct", ["c64", "c128"])
@pytest.mark.parametrize("kind", KINDS)
def test_cpu_matches_interpreter(kind, ct, tmp_path):
    text = module_text(kind, ct, SHAPES)
    args = random_inputs(kind, ct, SHAPES)
    bundle = compile_bundle(text, tmp_path / "m.bundle", opt_level=3)
    assert len(_fft_kernels(bundle)) == len(SHAPES)
    assert_close(load_cpu(bundle).run(args), interpret(text, args), ct)


def test_cpu_work_counts_every_pass_term(tmp_path):
    # 1-D: batch * n outputs * n terms; 2-D: each point sums a row, then a column.
    shapes = [((3,), (8,)), ((2,), (4, 6))]
    bundle = compile_bundle(module_text("FFT", "c64", shapes), tmp_path / "m.bundle", opt_level=3)
    works = sorted(k["work"] for k in _fft_kernels(bundle))
    assert works == sorted([3 * 8 * 8, 2 * 4 * 6 * (4 + 6)])
    extents = sorted(k["parallel_extent"] for k in _fft_kernels(bundle))
    assert extents == [2, 3]  # one unit per batch element


def test_cpu_empty_and_big_transforms(tmp_path):
    # An empty batch writes nothing; FFT{512} is left to numpy (O(n log n) wins there).
    shapes = [((0,), (6,)), ((2,), (512,))]
    text = module_text("FFT", "c64", shapes)
    args = random_inputs("FFT", "c64", shapes)
    bundle = compile_bundle(text, tmp_path / "m.bundle", opt_level=3)
    kernels = _fft_kernels(bundle)
    assert [k["parallel_extent"] for k in kernels] == [0]
    assert_close(load_cpu(bundle).run(args), interpret(text, args), "c64")


@pytest.mark.parametrize("kind", KINDS)
def test_big_batches_run_in_pieces(kind, tmp_path, monkeypatch):
    """The host FFT of a big batch runs in pieces of a few batch elements on the pool's
    threads (runtime/cpu/host.build_fft): the same values as one call, the pieces' seams
    included (odd counts, two batch dimensions)."""
    from hloc.runtime.cpu import host

    shapes = [((3, 7), (16, 24)), ((5,), (33,))]
    monkeypatch.setattr(host, "PARALLEL_FFT_ELEMENTS", 64)
    monkeypatch.setattr(host, "FFT_PIECE_ELEMENTS", 700)
    from hloc.runtime.cpu import parallel

    pieces = []
    real = parallel.Pool.run
    monkeypatch.setattr(parallel.Pool, "run", lambda self, fn, ranges: pieces.append(
        len(ranges)) or real(self, fn, ranges))
    text = module_text(kind, "c64", shapes)
    args = random_inputs(kind, "c64", shapes, seed=5)
    bundle = compile_bundle(text, tmp_path / "m.bundle")
    assert_close(load_cpu(bundle).run(args), interpret(text, args), "c64")
    assert sorted(pieces)[-1] >= 5 and len(pieces) == 2  # 21 elements of 16x24: 5 pieces or more


# ---- CUDA (emulated) ---------------------------------------------------------------------------

@pytest.mark.parametrize("ct", ["c64", "c128"])
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_emulated_matches_interpreter(kind, ct):
    text = module_text(kind, ct, SHAPES)
    got, want, ex = emulate_hlo(text, random_inputs(kind, ct, SHAPES, seed=1))
    assert variants(ex)["fft"] == len(SHAPES)
    assert not any("runs on the host" in n for n in ex.program.notes)
    assert_close(got, want, ct)


def test_cuda_big_transform_stays_on_the_host():
    shapes = [((), (32, 64)), ((2,), (6,))]
    text = module_text("IFFT", "c64", shapes)
    got, want, ex = emulate_hlo(text, random_inputs("IFFT", "c64", shapes))
    assert variants(ex)["fft"] == 1
    notes = [n for n in ex.program.notes if "runs on the host" in n]
    assert len(notes) == 1 and "2048 terms" in notes[0], notes
    assert_close(got, want, "c64")


# ---- XLA's outputs ------------------------------------------------------------------------------

SAMPLE_CASES = [(n, s) for n in ("fft", "ops/fft_types") for s in (".pb", ".opt.pb")]


def _count_ffts(path) -> int:
    module = load(path).module
    return sum(1 for c in module.computations for i in c.instructions if i.opcode.value == "fft")


def _check_sample(name: str, outputs) -> None:
    expected = sample_arrays(name, "expected")
    problems = [f"out{i}: {why}" for i, (g, e, d) in
                enumerate(zip(outputs, expected, sample_meta(name)["outputs"], strict=True))
                if (why := mismatch(np.asarray(g), e, d)) is not None]
    assert not problems, problems


@pytest.mark.parametrize("name,suffix", SAMPLE_CASES)
def test_samples_cpu_native(name, suffix, tmp_path):
    require_samples()
    path = SAMPLES / f"{name}{suffix}"
    bundle = compile_bundle(path, tmp_path / "m.bundle", opt_level=3)
    assert len(_fft_kernels(bundle)) == _count_ffts(path) > 0
    _check_sample(name, load_cpu(bundle).run(sample_arrays(name, "inputs")))


def test_default_level_keeps_the_library_fft(tmp_path):
    # -O2 compiles no FFT kernel (compile time, like XLA's library call); the thunk's numpy
    # path gives the same results.
    require_samples()
    path = SAMPLES / "fft.pb"
    bundle = compile_bundle(path, tmp_path / "m.bundle", opt_level=2)
    assert not _fft_kernels(bundle)
    _check_sample("fft", load_cpu(bundle).run(sample_arrays("fft", "inputs")))


@pytest.mark.parametrize("name,suffix", SAMPLE_CASES)
def test_samples_cuda_emulated(name, suffix):
    require_samples()
    from .support.bundles import load_emulated

    path = SAMPLES / f"{name}{suffix}"
    ex = load_emulated(path, cuda_archs=("sm_80",))
    assert variants(ex)["fft"] == _count_ffts(path) > 0
    assert not any("runs on the host" in n for n in ex.program.notes)
    _check_sample(name, ex.run(sample_arrays(name, "inputs")))

