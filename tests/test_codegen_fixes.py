"""Elemental emitter fixes: sin/cos/tan over the whole f32 range, XLA's NaN bits for
maximum/minimum/clamp (and bf16 NaNs), on the CPU kernels and the CUDA emulator.

Oracles: numpy's float64 sin/cos/tan (glibc, correctly reduced) for accuracy, the reference
interpreter bit for bit for specials and NaN patterns, and XLA's outputs in samples/.
Run with `-s` for the accuracy table and the speed figures.
"""

from __future__ import annotations

import ctypes
import math
import re
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hloc.codegen.elemental import trig
from hloc.codegen.target import host_target
from hloc.frontend import load
from hloc.ir import Opcode
from hloc.ir.text.parser import parse_module
from hloc.passes.call_inliner import CallInliner
from hloc.runtime.interpreter import evaluate
from hloc.runtime.interpreter import registry as interp_registry

from .conftest import SAMPLES, sample_arrays, sample_meta
from .support.hlo import unary
from .support.kernels import (
    Compiled,
    LoadedKernels,
    computation_spec,
    emit_kernels,
    entry_spec,
    reference,
)
from .support.run import run_cases
from .test_interp_samples import mismatch

pytestmark = pytest.mark.cpu

TRIG = {"sine": np.sin, "cosine": np.cos, "tan": np.tan}
MAX_ULP = {"sine": 2.0, "cosine": 2.0, "tan": 3.5}
BACKENDS = ["cpu", "cuda"]
RUNNERS = {"cpu": "cpu-kernels", "cuda": "cuda-emulated"}  # the kernel alone on the CPU


def _run(text: str, inputs, backend: str) -> list[np.ndarray]:
    return run_cases({"case": (text, inputs)}, RUNNERS[backend])["case"].got


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


# ---- the 2/pi table ------------------------------------------------------------------------

def test_two_over_pi_bits_match_published_digits():
    # 2/pi = 0.A2F9836E 4E441529 FC2757D1 F534DDC0 DB629599 3C439041 FE5163AB (hex)
    published = 0xA2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163AB
    assert trig.two_over_pi_bits(224) == published
    assert abs(trig.two_over_pi_bits(60) / 2.0**60 - 2 / math.pi) < 1e-16


# ---- sin / cos / tan accuracy ----------------------------------------------------------------

HARDEST = Path(__file__).parent / "data" / "trig_hardest_f32.txt"


def hardest_arguments() -> np.ndarray:
    """For every binade >= 1, the f32 closest to a multiple of pi/2: the table that
    search_hardest_arguments produced (the search costs about 15 s of CPU;
    test_hardest_arguments_table, marked slow, checks the table against it)."""
    lines = [ln for ln in HARDEST.read_text().splitlines() if not ln.startswith("#")]
    return np.array([int(h, 16) for h in lines], np.uint32).view(np.float32)


def search_hardest_arguments() -> np.ndarray:
    """For every binade >= 1, the f32 closest to a multiple of pi/2 (exhaustive search over
    the 2**23 mantissas in 2.94 fixed point from the exact bits of 2/pi)."""
    nbits = 400
    two_over_pi = trig.two_over_pi_bits(nbits)
    mants = np.arange(1 << 23, 1 << 24, dtype=np.uint64)
    found = []
    for e in range(127, 255):
        shift = nbits - (e - 150)
        frac = (two_over_pi % (1 << shift)) >> (shift - 96)  # 2**(e-150)*2/pi mod 1, 96 bits
        hi, lo = np.uint64(frac >> 32), np.uint64(frac & 0xFFFFFFFF)
        pos = mants * hi + ((mants * lo) >> np.uint64(32))  # M * frac mod 1 in 2**-64 units
        dist = np.minimum(pos, np.uint64(0) - pos)
        found.append(float(mants[int(np.argmin(dist))]) * 2.0 ** (e - 150))
    return np.array(found, np.float32)


@pytest.mark.slow
def test_hardest_arguments_table():
    assert hardest_arguments().view(np.uint32).tolist() == \
        search_hardest_arguments().view(np.uint32).tolist()


def trig_sweep(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k = np.unique(np.round(np.exp2(rng.uniform(0, 127.3, 100_000))))
    near = (k * (np.pi / 2)).astype(np.float32)
    near = near[np.isfinite(near)]
    near = np.concatenate([near, np.nextafter(near, np.float32(np.inf)),
                           np.nextafter(near, np.float32(0))])
    strided = np.arange(0, 0x7F800000, 2039, dtype=np.uint32).view(np.float32)
    hard = hardest_arguments()
    hard = np.concatenate([hard, np.nextafter(hard, np.float32(np.inf))])
    parts = [rng.uniform(-4, 4, 200_000), rng.uniform(-1e4, 1e4, 200_000),
             np.exp2(rng.uniform(-20, 128, 400_000)) * rng.choice([-1, 1], 400_000),
             near, strided, hard,
             [np.pi / 4, 1.0, 2 ** 23, 2 ** 24, 3.4028235e38, np.pi / 2, np.pi, 1e-30]]
    x = np.concatenate([np.asarray(p).astype(np.float32) for p in parts])
    return np.concatenate([x, -x])


def trig_errors(op: str, x: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """(max ulp, max relative error) against float64 numpy where the result is a normal f32."""
    with np.errstate(all="ignore"):
        ref = TRIG[op](x.astype(np.float64))
        ok = np.isfinite(ref) & (np.abs(ref) >= np.finfo(np.float32).tiny) & (np.abs(ref) < 3e38)
        ulp = np.spacing(np.abs(ref[ok]).astype(np.float32)).astype(np.float64)
        err = np.abs(got[ok].astype(np.float64) - ref[ok])
    return float((err / ulp).max()), float((err / np.abs(ref[ok])).max())


@pytest.fixture(scope="module")
def sweep() -> np.ndarray:
    return trig_sweep()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", sorted(TRIG))
def test_trig_accuracy_whole_f32_range(op, backend, sweep):
    got = _run(unary(op, "f32", len(sweep)), [sweep], backend)[0]
    max_ulp, max_rel = trig_errors(op, sweep, got)
    print(f"\n{backend:4s} {op:7s} points={len(sweep)} max_ulp={max_ulp:.2f} max_rel={max_rel:.2e}")
    assert max_ulp <= MAX_ULP[op] and max_rel <= 1e-6, (max_ulp, max_rel)


def trig_specials(t: str) -> np.ndarray:
    """±0, ±inf, NaNs, denormals, limits and neighbours of pi/4, 1 and pi/2, in type t."""
    f32 = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-40,
                    1.1754944e-38, 3.4028235e38, -3.4028235e38, 0.7853981, 0.78539819,
                    0.78539824, 0.99999994, 1.0, 1.0000001, 1.5707963, 1.5707964, 3.1415927,
                    1e5, -1e5, 1e10, 6.5504e4, 16367173 * 2.0**72], np.float32)
    if t == "f32":
        return f32
    dt = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64}[t]
    with np.errstate(all="ignore"):
        return f32.astype(np.float64).astype(dt)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("t", ["f32", "f16", "bf16", "f64"])
@pytest.mark.parametrize("op", sorted(TRIG))
def test_trig_specials_match_interpreter(op, t, backend):
    x = trig_specials(t)
    text = unary(op, t, len(x))
    got = _run(text, [x], backend)[0].astype(np.float64)
    want = reference(parse_module(text).entry, [x])[0].astype(np.float64)
    assert (np.isnan(got) == np.isnan(want)).all(), (x, got, want)
    zero = want == 0
    assert (np.signbit(got[zero]) == np.signbit(want[zero])).all(), (x[zero], got[zero])
    rtol = {"f32": 2e-6, "f64": 1e-15, "f16": 1e-3, "bf16": 8e-3}[t]
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=0)


def test_sin_loop_still_vectorizes():
    target = host_target()
    if "+avx512f" not in target.features:
        pytest.skip("the <16 x float> check needs AVX-512")
    emitted = emit_kernels([entry_spec(parse_module(unary("sine", "f32", 1 << 16)), "k")],
                           target)
    ir_text = emitted.metadata.optimized_ir
    assert re.search(r"<16 x float>", ir_text)
    assert "masked.gather" not in ir_text  # the 2/pi window comes from selects, not loads
    assert not re.search(r"call .*@sinf?\(", ir_text)


@pytest.mark.slow
def test_trig_speed_report():
    """Prints kernel throughput on 16M elements (single thread); fails only if not vector speed."""
    n = 16 * 1024 * 1024
    rng = np.random.default_rng(1)
    x = rng.uniform(-4, 4, n).astype(np.float32)
    times = {}
    for op in ["negate", "sine", "cosine", "tan"]:
        emitted = emit_kernels([entry_spec(parse_module(unary(op, "f32", n)), "k")],
                               host_target())
        kernels = LoadedKernels(emitted)
        out = np.empty(n, np.float32)
        ptrs = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
        buffers = ctypes.cast(ptrs, ctypes.c_void_p)
        fn, extent = kernels.function("k"), emitted.metadata.kernels["k"].parallel_extent
        fn(buffers, 0, extent)
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            fn(buffers, 0, extent)
            samples.append(time.perf_counter() - start)
        times[op] = min(samples)
        print(f"\n{op:7s} {times[op] * 1e3:7.2f} ms  {n / times[op] / 1e9:.2f} Gelem/s")
    assert times["sine"] < 12 * times["negate"]


# ---- maximum / minimum / clamp NaN bits ------------------------------------------------------

_SPECIAL_BITS = {
    "f32": (np.uint32, [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFA00001, 0x7F800001, 0,
                        0x80000000, 1, 0x80000001, 0x007FFFFF, 0x3F800000, 0xBF800000,
                        0x7F800000, 0xFF800000, 0x00800000]),
    "f64": (np.uint64, [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000012345,
                        0xFFF4000000000001, 0, 1 << 63, 1, (1 << 63) | 1, 0x3FF0000000000000,
                        0xBFF0000000000000, 0x7FF0000000000000, 0xFFF0000000000000]),
    "bf16": (np.uint16, [0x7FC0, 0xFFC0, 0x7FC5, 0xFFA1, 0x7F81, 0, 0x8000, 1, 0x8001, 0x3F80,
                         0xBF80, 0x7F80, 0xFF80, 0x0080]),
    "f16": (np.uint16, [0x7E00, 0xFE00, 0x7E05, 0xFD01, 0x7C01, 0, 0x8000, 1, 0x8001, 0x3C00,
                        0xBC00, 0x7C00, 0xFC00, 0x0400]),
}
_DTYPES = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "f16": np.float16}

MIN_MAX_CLAMP = """HloModule m
ENTRY e {{
  a = {t}[{n}] parameter(0)
  b = {t}[{n}] parameter(1)
  c = {t}[{n}] parameter(2)
  mx = {t}[{n}] maximum(a, b)
  mn = {t}[{n}] minimum(a, b)
  cl = {t}[{n}] clamp(a, b, c)
  ROOT r = ({t}[{n}], {t}[{n}], {t}[{n}]) tuple(mx, mn, cl)
}}"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("t", sorted(_SPECIAL_BITS))
def test_min_max_clamp_nan_bits_match_interpreter(t, backend):
    """Every triple of NaNs (quiet, signalling, payloads, both signs), ±0, denormals, ±1,
    ±inf: the result bits equal the interpreter's (which reproduces XLA CPU)."""
    uint, bits = _SPECIAL_BITS[t]
    values = np.array(bits, uint).view(_DTYPES[t])
    a, b, c = (v.ravel() for v in np.meshgrid(values, values, values, indexing="ij"))
    text = MIN_MAX_CLAMP.format(t=t, n=len(a))
    got = _run(text, [a, b, c], backend)
    want = reference(parse_module(text).entry, [a, b, c])
    for name, g, w in zip(["maximum", "minimum", "clamp"], got, want, strict=True):
        bad = _bits(g) != _bits(w)
        assert not bad.any(), (f"{name} {t}: {int(bad.sum())} differ, e.g. "
                               f"{[hex(v[bad][0]) for v in map(_bits, (a, b, c))]} -> "
                               f"{hex(_bits(g)[bad][0])}, want {hex(_bits(w)[bad][0])}")


BF16_ARITH = """HloModule m
ENTRY e {{
  a = bf16[{n}] parameter(0)
  b = bf16[{n}] parameter(1)
  w = f32[{n}] parameter(2)
  s = bf16[{n}] add(a, b)
  p = bf16[{n}] multiply(a, b)
  g = bf16[{n}] negate(a)
  v = bf16[{n}] convert(w)
  ROOT r = (bf16[{n}], bf16[{n}], bf16[{n}], bf16[{n}]) tuple(s, p, g, v)
}}"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_results_drop_nan_payloads(backend):
    """XLA CPU rounds f32 to bf16 so that every NaN becomes 0x7fc0 with its sign."""
    uint, bits = _SPECIAL_BITS["bf16"]
    values = np.array(bits, uint).view(ml_dtypes.bfloat16)
    a, b = (v.ravel() for v in np.meshgrid(values, values, indexing="ij"))
    wide = np.array([0x7FC50000, 0xFFC12345, 0x7FA00000, 0x7F800001, 0x3F800000] * 40,
                    np.uint32)[: len(a)].view(np.float32)
    text = BF16_ARITH.format(n=len(a))
    got = _run(text, [a, b, wide], backend)
    want = reference(parse_module(text).entry, [a, b, wide])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(_bits(g), _bits(w))
    assert {int(v) for v in _bits(got[3])[np.isnan(wide)]} == {0x7FC0, 0xFFC0}


# ---- the samples that failed before, against XLA's outputs -----------------------------------

FIXED_SAMPLES = ["ops/trig_edges", "math", "ops/maximum_nan", "ops/clamp_select"]


def _check_expected(name: str, outputs) -> None:
    expected = sample_arrays(name, "expected")
    assert len(outputs) == len(expected)
    problems = [f"out{i}: {why}" for i, (g, e, d) in
                enumerate(zip(outputs, expected, sample_meta(name)["outputs"], strict=True))
                if (why := mismatch(np.asarray(g), e, d)) is not None]
    assert not problems, "; ".join(problems)


def _require(name: str, suffix: str) -> None:
    if not (SAMPLES / f"{name}{suffix}").exists():
        pytest.skip(f"sample {name}{suffix} not generated")


@pytest.mark.parametrize("name", FIXED_SAMPLES)
def test_sample_entry_as_one_cpu_kernel(name):
    """The JAX-lowered module (calls inlined) as a single CPU kernel vs XLA's outputs."""
    _require(name, ".pb")
    module = load(SAMPLES / f"{name}.pb").module
    CallInliner().run(module)
    spec = entry_spec(module, "k")
    _check_expected(name, Compiled([spec]).run("k", sample_arrays(name, "inputs")))


@pytest.mark.parametrize("name", FIXED_SAMPLES)
def test_sample_fusions_as_cpu_kernels(name, monkeypatch):
    """XLA's optimized module with every fusion run as a CPU kernel (the interpreter only
    moves values between them) vs XLA's outputs."""
    _require(name, ".opt.pb")
    module = load(SAMPLES / f"{name}.opt.pb").module
    ran = []
    # Every fusion, loop bodies' included, is compiled once, all into one object.
    fusions = [i for c in module.computations if not c.is_fusion for i in c.instructions
               if i.opcode == Opcode.FUSION]
    symbols = {i.name: f"fusion{k}" for k, i in enumerate(fusions)}
    kernels = Compiled([computation_spec(i.called[0], symbols[i.name]) for i in fusions])

    def fusion_kernel(ctx, instr, ops):
        outs = kernels.run(symbols[instr.name], ops)
        ran.append(instr.name)
        return tuple(outs) if instr.shape.is_tuple else outs[0]

    interp_registry.IMPLS.load()
    monkeypatch.setitem(interp_registry.IMPLS._entries, Opcode.FUSION, fusion_kernel)
    results = evaluate(module, sample_arrays(name, "inputs")).flatten()
    assert ran, "no fusion ran as a kernel"
    _check_expected(name, results)


@pytest.mark.parametrize("name", FIXED_SAMPLES)
def test_sample_on_cuda_emulator(name):
    """XLA's optimized module on the emulator (test_cuda_samples runs the .pb form of every
    sample there in `make test`, and the .opt.pb forms only in `make test-all`)."""
    _require(name, ".opt.pb")
    from .support.bundles import load_emulated

    executable = load_emulated(SAMPLES / f"{name}.opt.pb")
    _check_expected(name, executable.run(sample_arrays(name, "inputs")))
