"""XLA CPU's evaluation order and rounding, reproduced bit for bit.

The oracle is XLA itself: samples/ops/long_scans, sum_order, divide_order, fma_contraction and
f64_math hold outputs XLA CPU computed for scans, narrow-float sums, short f32 sums, means,
divisions by a broadcast, multiply-adds (which its LLVM fuses into FMAs) and its own f64 exp,
tanh and log1p and the expm1 built on them; f64_libm its libm's sin, cos, tan, atan2 and pow
inside vectorized loops.
Compiled for the CPU (the host's features and x86-64-v3) and for the interpreter, they must
match those outputs exactly (the exceptions, NOT_EXACT, round through exp, log or rsqrt). Independently of XLA, numpy
models of the two orders (blocks of 16 for scans, windows of 32 for sums) check the passes'
rewrites, so a wrong rewrite fails here even where a sample happens not to reach it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hloc.bundle import read_bundle
from hloc.codegen.target import cpu_target, host_target
from hloc.ir import Opcode
from hloc.ir.text.parser import parse_module
from hloc.runtime.executable import InterpreterExecutable
from hloc.runtime.interpreter import evaluate
from tests.conftest import SAMPLES, sample_arrays

from .support.bundles import load_cpu, sample_bundle
from .support.golden import bits_equal
from .support.hlo import run_passes

pytestmark = pytest.mark.cpu

# Outputs that round through functions XLA evaluates its own way: exp/log (cumlogsumexp), and
# rsqrt (an L2 normalization: XLA CPU refines the processor's reciprocal square-root estimate
# with Newton steps, whose last bit depends on the processor; hloc computes 1/sqrt(x)).
NOT_EXACT = {("ops/long_scans", 6), ("ops/divide_order", 4)}
# The interpreter's exp is the correctly rounded one, compiled code XLA's polynomial: a softmax
# matches XLA bit for bit compiled only.
# numpy's f64 tan, atan2 and pow (and sin and cos inside a product) are not glibc's, whose
# bits XLA CPU's libm calls give.
NOT_EXACT_INTERPRETED = {("ops/divide_order", 3)} | {("ops/f64_libm", i) for i in range(2, 7)}
# Multiply-adds that XLA's LLVM fuses into FMAs: compiled code fuses them as XLA does where the
# target has FMA; the interpreter, and code for a target without FMA, round the product first.
# XLA's f64 exp, tanh and log1p (and softplus, logistic and expm1, built on them) are rational
# approximations evaluated with FMAs; the interpreter takes numpy's.
FUSED = {("ops/fma_contraction", i) for i in range(9)} | {("ops/f64_math", i) for i in range(6)}
TARGETS = [({}, "cpu"), ({"cpu": "x86-64-v3"}, "cpu"), ({"target": "interpreter"}, "interpreter")]


def _fuses(options: dict, device: str) -> bool:
    """Whether code for this target fuses multiply-adds (needs FMA; not the interpreter)."""
    if device == "interpreter":
        return False
    target = cpu_target(options["cpu"]) if "cpu" in options else host_target()
    return target.has("fma")


def _run(name: str, options: dict, device: str, tmp_path):
    bundle = sample_bundle(SAMPLES / f"{name}.pb", tmp_path / "s.bundle", **options)
    exe = load_cpu(bundle) if device == "cpu" else InterpreterExecutable(read_bundle(str(bundle)))
    return exe.run(sample_arrays(name, "inputs"))


@pytest.mark.parametrize("options,device", TARGETS, ids=["cpu", "x86-64-v3", "interpreter"])
# `fft`: numpy's pocketfft in f32 (runtime/interpreter/fftn.py) gives DUCC's bits there; its
# f64 loop, which numpy picked for forward c64 transforms, missed 353 of 546 values.
@pytest.mark.parametrize("name", ["ops/long_scans", "ops/sum_order", "ops/divide_order",
                                  "ops/fma_contraction", "ops/f64_math", "ops/f64_libm", "fft"])
def test_compiled_modules_round_like_xla(name, options, device, tmp_path):
    got = _run(name, options, device, tmp_path)
    expected = sample_arrays(name, "expected")
    inexact = NOT_EXACT | (NOT_EXACT_INTERPRETED if device == "interpreter" else set())
    if not _fuses(options, device):
        inexact |= FUSED
    wrong = []
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if (name, i) in inexact:
            np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)
        elif not bits_equal(np.asarray(g), e):
            wrong.append(i)
    assert not wrong, f"outputs {wrong} are not XLA's bits"


# ---- independent models of the orders -----------------------------------------------------
def _left_to_right(values: np.ndarray, init, op=np.add) -> np.ndarray:
    """Inclusive scan, each step rounded to the values' type."""
    out = np.empty_like(values)
    acc = np.asarray(init, values.dtype)
    for i, v in enumerate(values):
        acc = op(acc, v).astype(values.dtype)
        out[i] = acc
    return out


def _suffixes(values: np.ndarray, init, op=np.add) -> np.ndarray:
    """A reverse scan as a reduce-window computes it: each suffix summed left to right."""
    return np.array([_left_to_right(values[i:], init, op)[-1] for i in range(len(values))],
                    values.dtype)


def _block_scan(x: np.ndarray, base: int = 16, op=np.add, init=0, reverse=False) -> np.ndarray:
    """XLA's tree scan: blocks of `base` from the start (padded at the end), each scanned,
    plus the exclusive scan of the blocks' totals. Windows visit their elements in index
    order, so a reverse scan sums each suffix left to right."""
    n = x.shape[0]
    if n <= base:
        return _suffixes(x, init, op) if reverse else _left_to_right(x, init, op)
    rows = -(-n // base)
    padded = np.concatenate([x, np.full(rows * base - n, init, x.dtype)]).reshape(rows, base)
    if reverse:
        inner = np.stack([_suffixes(r, init, op) for r in padded])
        totals = _block_scan(inner[:, 0], base, op, init, reverse=True)
        carried = np.concatenate([totals[1:], [np.asarray(init, x.dtype)]])
    else:
        inner = np.stack([_left_to_right(r, init, op) for r in padded])
        totals = _block_scan(inner[:, -1], base, op, init)
        carried = np.concatenate([[np.asarray(init, x.dtype)], totals[:-1]])
    return op(inner, carried.astype(x.dtype)[:, None]).astype(x.dtype).reshape(-1)[:n]


def _tree_sum(x: np.ndarray, window: int = 32):
    """XLA's tree reduction of a vector: windows of 32 with "SAME" padding, recursively."""
    n = x.shape[0]
    if n <= window:
        return _left_to_right(x, 0)[-1]
    parts = -(-n // window)
    low = (parts * window - n) // 2
    sums = [_left_to_right(x[max(0, p * window - low):min(n, (p + 1) * window - low)], 0)[-1]
            for p in range(parts)]
    return _tree_sum(np.array(sums, x.dtype), window)


SCAN = """HloModule scan
comb {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] {op}(a, b)
}}
ENTRY e {{
  x = {t}[{n}] parameter(0)
  z = {t}[] constant({init})
  ROOT c = {t}[{m}] reduce-window(x, z), window={{size={n} pad={pad}}}, to_apply=comb
}}
"""


@pytest.mark.parametrize("n", [17, 100, 257, 5141])
@pytest.mark.parametrize("t,dtype,op,init", [("f32", np.float32, "add", 0),
                                             ("f16", np.float16, "add", 0),
                                             ("f32", np.float32, "multiply", 1)])
def test_scan_rewrite_follows_the_block_order(n, t, dtype, op, init):
    rng = np.random.default_rng(n)
    x = (1 + rng.standard_normal(n) * 1e-2 if op == "multiply" else rng.standard_normal(n))
    x = x.astype(dtype)
    ufunc = {"add": np.add, "multiply": np.multiply}[op]
    module = parse_module(SCAN.format(t=t, n=n, m=n, pad=f"{n - 1}_0", op=op, init=init))
    run_passes(module, "reduce-window-rewriter")
    got = evaluate(module, [x]).flatten()[0]
    assert bits_equal(got, _block_scan(x, op=ufunc, init=init))
    # ...which is not the left-to-right order (the test could tell them apart).
    if n > 100 and op == "add":
        assert not bits_equal(got, _left_to_right(x, init))


@pytest.mark.parametrize("n", [20, 300])
def test_reverse_and_exclusive_scans(n):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(n).astype(np.float32)
    reverse = parse_module(SCAN.format(t="f32", n=n, m=n, pad=f"0_{n - 1}", op="add", init=0))
    exclusive = parse_module(SCAN.format(t="f32", n=n, m=n + 1, pad=f"{n}_0", op="add", init=0))
    run_passes(reverse, "reduce-window-rewriter")
    run_passes(exclusive, "reduce-window-rewriter")
    assert bits_equal(evaluate(reverse, [x]).flatten()[0], _block_scan(x, reverse=True))
    want = np.concatenate([[np.float32(0)], _block_scan(x)])
    assert bits_equal(evaluate(exclusive, [x]).flatten()[0], want)


SUM = """HloModule sum
add {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] add(a, b)
}}
ENTRY e {{
  x = {t}[{n}] parameter(0)
  z = {t}[] constant(0)
  ROOT r = {t}[] reduce(x, z), dimensions={{0}}, to_apply=add
}}
"""


@pytest.mark.parametrize("n", [33, 40, 1000, 5000])
@pytest.mark.parametrize("t,dtype", [("f16", np.float16), ("bf16", ml_dtypes.bfloat16),
                                     ("f32", np.float32)])
def test_tree_reduction_follows_windows_of_32(n, t, dtype):
    x = np.random.default_rng(n).standard_normal(n).astype(dtype)
    module = parse_module(SUM.format(t=t, n=n))
    run_passes(module, "tree-reduction-rewriter")
    got = evaluate(module, [x]).flatten()[0]
    if t == "f32" and n >= 4096:
        # XLA hands this one to its reduction library: the reduce stays as it is.
        assert module.entry.root.operands[0].opcode == Opcode.PARAMETER
        return
    assert bits_equal(np.asarray(got), np.asarray(_tree_sum(x)))


def test_mean_multiplies_by_the_reciprocal():
    """XLA's x / n is x * (1/n): 1/3 is inexact, so some quotients differ from the products."""
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    module = parse_module("""HloModule m
ENTRY e {
  x = f32[64] parameter(0)
  c = f32[] constant(3)
  b = f32[64] broadcast(c), dimensions={}
  ROOT d = f32[64] divide(x, b)
}
""")
    run_passes(module, "divide-by-constant")
    got = evaluate(module, [x]).flatten()[0]
    assert bits_equal(got, x * (np.float32(1) / np.float32(3)))
    assert not bits_equal(got, x / np.float32(3))


def test_targets_without_fma_round_each_product(tmp_path):
    """The same multiply-adds for a processor without FMA (x86-64-v2): each product rounded,
    as the interpreter computes them, bit for bit; the sample's XLA outputs differ."""
    name = "ops/fma_contraction"
    got = _run(name, {"cpu": "x86-64-v2"}, "cpu", tmp_path)
    interpreted = _run(name, {"target": "interpreter"}, "interpreter", tmp_path)
    expected = sample_arrays(name, "expected")
    for i in sorted(i for n, i in FUSED if n == name):
        assert bits_equal(np.asarray(got[i]), np.asarray(interpreted[i])), f"output {i}"
        assert not bits_equal(np.asarray(got[i]), expected[i]), f"output {i} fused"


LOGS = """HloModule logs
ENTRY e {
  x = f64[4096]{0} parameter(0)
  l = f64[4096]{0} log(x)
  p = f64[4096]{0} log-plus-one(x)
  ROOT t = (f64[4096]{0}, f64[4096]{0}) tuple(l, p)
}
"""


@pytest.mark.parametrize("options", [{}, {"cpu": "x86-64-v3"}], ids=["host", "x86-64-v3"])
def test_f64_log_loops_vectorize_around_libms_log(options, tmp_path):
    """f64 log (and log1p's log(x + 1) branch) take libm's log, as XLA CPU does, through
    LLVM's intrinsic: the loop vectorizes with one call per lane (a call to `log` itself, which
    may set errno, kept softplus loops scalar: 17 -> 11 ns an element). The bits stay libm's."""
    import math

    from .support.bundles import members
    from .support.run import run_cases

    rng = np.random.default_rng(11)
    x = np.exp(rng.uniform(-700, 700, 4096))
    x[:8] = [0.5, 0.4142135623730951, 0.41421356237309515, 1.0, 2.0, 1e-300, np.inf, 3.5]
    o = run_cases({"logs": (LOGS, [x])}, tmp=tmp_path, **options)["logs"]
    got_log, got_log1p = o.got
    assert bits_equal(got_log, np.array([math.log(v) for v in x]))
    large = np.abs(x) >= 0.41421356237309504880  # log1p's libm branch
    assert bits_equal(got_log1p[large], np.array([math.log(v + 1.0) for v in x[large]]))
    optimized = members(o.artifact)["module.opt.ll"].decode()
    assert "@llvm.log.v" in optimized  # vectorized: llvm.log.v4f64 or v8f64


LIBM_CALLS = """HloModule libm_calls
ENTRY e {
  x = f64[4096]{0} parameter(0)
  y = f64[4096]{0} parameter(1)
  s = f64[4096]{0} sine(x)
  c = f64[4096]{0} cosine(x)
  sc = f64[4096]{0} add(s, c)
  t = f64[4096]{0} tan(x)
  a = f64[4096]{0} atan2(x, y)
  ay = f64[4096]{0} abs(y)
  p = f64[4096]{0} power(ay, x)
  ROOT r = (f64[4096]{0}, f64[4096]{0}, f64[4096]{0}, f64[4096]{0}) tuple(sc, t, a, p)
}
"""


@pytest.mark.parametrize("options", [{}, {"cpu": "x86-64-v3"}], ids=["host", "x86-64-v3"])
def test_f64_libm_calls_vectorize_around_the_calls(options, tmp_path):
    """f64 sin, cos, tan, atan2 and pow take libm's, as XLA CPU does, through LLVM's
    intrinsics: their loops vectorize with one call per lane (calls to `sin` itself kept the
    whole loop scalar, XLA's exp in it too). A sin and a cos of one value may become one
    `sincos` call (allowed: glibc's returns its sin's and cos's bits). The bits stay libm's."""
    import math

    from .support.bundles import members
    from .support.run import run_cases

    rng = np.random.default_rng(12)
    x = rng.uniform(-20, 20, 4096)
    y = rng.uniform(-3, 3, 4096)
    o = run_cases({"libm": (LIBM_CALLS, [x, y])}, tmp=tmp_path, **options)["libm"]
    sc, t, a, p = o.got
    assert bits_equal(sc, np.array([math.sin(v) + math.cos(v) for v in x]))
    assert bits_equal(t, np.array([math.tan(v) for v in x]))
    assert bits_equal(a, np.array([math.atan2(u, v) for u, v in zip(x, y, strict=True)]))
    assert bits_equal(p, np.array([math.pow(abs(v), u) for u, v in zip(x, y, strict=True)]))
    optimized = members(o.artifact)["module.opt.ll"].decode()
    for fn in ("tan", "atan2", "pow"):
        assert f"@llvm.{fn}.v" in optimized, fn  # vectorized: v4f64 or v8f64
    assert "@llvm.sin.v" in optimized or "@llvm.sincos.v" in optimized
