"""Reduce-window roots with kernel segments of their own (codegen/cpu/reduce_window.py).

- Cumulative windows run as scans (codegen/cpu/scan.py): output j is output j - 1 combined
  with the one element its window adds, in the taps' order, so the results are the elemental
  form's bits (and the interpreter's) for any reducer; reverse scans only for reducers whose
  result does not depend on the order.
- Long windows that leave the contiguous dimension alone sweep a block of it per tap, the
  taps in the same order: the interpreter's bits again."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hloc.codegen.cpu.scan import Scan, as_scan
from hloc.ir.text.parser import parse_module
from hloc.runtime.interpreter import evaluate

from .support.bundles import kernels_json, members
from .support.hlo import reducer_text
from .support.kernels import Compiled, entry_spec, reference
from .support.run import run_cases
from .support.values import assert_same_bits

pytestmark = pytest.mark.cpu

ARGMAX = """
argmax {
  v = f32[] parameter(0)
  i = s32[] parameter(1)
  w = f32[] parameter(2)
  j = s32[] parameter(3)
  gt = pred[] compare(w, v), direction=GT
  mv = f32[] select(gt, w, v)
  mi = s32[] select(gt, j, i)
  ROOT t = (f32[], s32[]) tuple(mv, mi)
}
"""


def _window(rank: int, axis: int, size: int, low: int, high: int) -> str:
    sizes = ["1"] * rank
    pads = ["0_0"] * rank
    sizes[axis], pads[axis] = str(size), f"{low}_{high}"
    return f"size={'x'.join(sizes)} pad={'x'.join(pads)}"


def _out(shape, axis: int, size: int, low: int, high: int) -> list[int]:
    dims = list(shape)
    dims[axis] = shape[axis] + low + high - size + 1
    return dims


def scan_text(dtype: str, shape, axis: int, size: int, low: int, high: int, op: str = "add",
              init: str = "0", producer: str = "") -> str:
    """A one-input reduce-window along `axis` of `x` (or of `producer`, an op applied to it
    first, which the kernel fuses), reducer `op`."""
    dims = ",".join(map(str, shape))
    out = ",".join(map(str, _out(shape, axis, size, low, high)))
    src = "x"
    lines = [f"  x = {dtype}[{dims}] parameter(0)"]
    if producer:
        lines += [f"  c = {dtype}[] constant(3)", f"  cb = {dtype}[{dims}] broadcast(c), dimensions={{}}",
                  f"  p = {dtype}[{dims}] {producer}(x, cb)"]
        src = "p"
    lines += [f"  z = {dtype}[] constant({init})",
              f"  ROOT r = {dtype}[{out}] reduce-window({src}, z), "
              f"window={{{_window(len(shape), axis, size, low, high)}}}, to_apply=r_{op}_{dtype}"]
    return f"HloModule scan\n{reducer_text(op, dtype)}\nENTRY e {{\n" + "\n".join(lines) + "\n}\n"


def argmax_text(n: int) -> str:
    return f"""HloModule argmax
{ARGMAX}
ENTRY e {{
  v = f32[4,{n}] parameter(0)
  i = s32[4,{n}] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[4,{n}], s32[4,{n}]) reduce-window(v, i, ninf, zero), window={{size=1x{n} pad=0_0x{n - 1}_0}}, to_apply=argmax
}}
"""


def _root(text: str):
    return parse_module(text).entry.root


def test_cumulative_windows_are_scans():
    # cumsum: windows of n with n - 1 padding before
    assert as_scan(_root(scan_text("f32", (6, 40), 1, 40, 39, 0))) == Scan(1, True, 0, (0, 0))
    # exclusive: one more output, the first the init value
    assert as_scan(_root(scan_text("f32", (6, 40), 1, 40, 40, 0))) == Scan(1, True, -1, (0, 0))
    # windows that start at element 0 but end further on: elements ahead of the first step
    assert as_scan(_root(scan_text("f32", (10,), 0, 10, 4, 0))) == Scan(0, True, 5, (0, 5))
    # reverse: exact reducers only
    assert as_scan(_root(scan_text("s32", (9, 5), 0, 9, 0, 8))) == Scan(0, False, 8, (9, 9))
    assert as_scan(_root(scan_text("f32", (9, 5), 0, 9, 0, 8, op="maximum", init="-inf"))) \
        == Scan(0, False, 8, (9, 9))
    assert as_scan(_root(scan_text("f32", (9, 5), 0, 9, 0, 8))) is None
    # sliding windows (not all starting in the padding), strided, or along two dimensions
    assert as_scan(_root(scan_text("f32", (40,), 0, 8, 7, 0))) is None
    two = scan_text("f32", (8, 8), 0, 8, 7, 0).replace("size=8x1 pad=7_0x0_0",
                                                      "size=8x2 pad=7_0x1_0")
    assert as_scan(_root(two)) is None
    strided = scan_text("f32", (8,), 0, 8, 7, 0).replace("size=8 pad=7_0", "size=8 stride=2 pad=7_0")
    assert as_scan(_root(strided.replace("f32[8]{0} reduce", "f32[4] reduce")
                         .replace("r = f32[8] reduce", "r = f32[4] reduce"))) is None


CASES = {
    # name: (dtype, shape, axis, size, low, high, op, init, producer)
    "cumsum_rows": ("f32", (6, 40), 1, 40, 39, 0, "add", "0", ""),
    "cumsum_columns": ("f32", (40, 33), 0, 40, 39, 0, "add", "0", ""),
    "cumsum_wide_columns": ("f32", (3, 5, 1100), 1, 5, 4, 0, "add", "0", "subtract"),
    "exclusive": ("f32", (5, 20), 1, 20, 20, 0, "add", "0", ""),
    "ahead": ("f32", (10, 7), 0, 10, 4, 0, "add", "0", ""),
    "starts_in_padding": ("f32", (3, 6), 1, 8, 9, 0, "add", "0", ""),
    "ends_in_padding": ("f32", (3, 6), 1, 10, 7, 4, "add", "0", ""),
    "cumprod": ("f32", (4, 30), 1, 30, 29, 0, "multiply", "1", "add"),
    "cummin_int": ("s32", (7, 50), 1, 50, 49, 0, "minimum", "2147483647", "subtract"),
    "reverse_int_sum": ("s32", (9, 5), 0, 9, 0, 8, "add", "0", ""),
    "reverse_max": ("f32", (4, 25), 1, 25, 0, 24, "maximum", "-inf", ""),
    "reverse_float_sum": ("f32", (4, 25), 1, 25, 0, 24, "add", "0", ""),  # stays elemental
    "bf16_cumsum": ("bf16", (3, 64), 1, 64, 63, 0, "add", "0", ""),
}


def _inputs(dtype: str, shape, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "s32":
        return [rng.integers(-1000, 1000, shape).astype(np.int32)]
    x = rng.standard_normal(shape).astype(np.float32)
    return [x.astype(ml_dtypes.bfloat16) if dtype == "bf16" else x]


@pytest.mark.parametrize("chunks", [1, 3])
def test_scans_have_the_interpreters_bits(chunks):
    """Every case compiled as one kernel, run in one range of work units and in three,
    gives the interpreter's bits; every case but the float reverse sum is a scan."""
    modules = {name: parse_module(scan_text(*case)) for name, case in CASES.items()}
    modules["argmax"] = parse_module(argmax_text(37))
    specs = {name: entry_spec(m, f"k_{name}") for name, m in modules.items()}
    compiled = Compiled(list(specs.values()))
    for n, (name, module) in enumerate(modules.items()):
        case = CASES.get(name, ("f32", (4, 37)))
        inputs = _inputs(case[0], case[1], n)
        got = compiled.run(specs[name].name, inputs, chunks=chunks)
        assert_same_bits(got, reference(module.entry, inputs), name)
        segments = compiled.emitted.metadata.kernels[specs[name].name].segments
        assert segments == (("loop",) if name == "reverse_float_sum" else ("scan",)), name


def test_scans_after_the_rewriter_keep_the_optimized_modules_bits(tmp_path):
    """Through the passes: long scans become rows of 16 (reduce_window_rewriter, XLA's sum
    order) whose windows the kernels run as scans. The results have the bits of the
    interpreter run on the optimized module the bundle carries (the unoptimized module sums
    floats in another order)."""
    names = ("cumsum_rows", "cumsum_columns", "cummin_int", "exclusive", "bf16_cumsum")
    cases = {name: (scan_text(*CASES[name]), _inputs(CASES[name][0], CASES[name][1], n))
             for n, name in enumerate(names)}
    for name, outcome in run_cases(cases, "cpu", tmp=tmp_path).items():
        optimized = parse_module(members(outcome.artifact)["module.hlo"].decode())
        assert_same_bits(outcome.got, evaluate(optimized, cases[name][1]).flatten(), name)
        kinds = {s for k in kernels_json(outcome.artifact)["kernels"].values()
                 for s in k["segments"]}
        assert "scan" in kinds, (name, kinds)


def rows_text(dtype: str, shape, window: str, out, reducer: str = "add", init: str = "0") -> str:
    dims = ",".join(map(str, shape))
    return f"""HloModule rows
{reducer_text(reducer, dtype)}
ENTRY e {{
  x = {dtype}[{dims}] parameter(0)
  z = {dtype}[] constant({init})
  ROOT r = {dtype}[{",".join(map(str, out))}] reduce-window(x, z), window={{{window}}}, to_apply=r_{reducer}_{dtype}
}}
"""


ROWS = {
    # XLA's tree reduction of a complex sum over batch and time: windows of 4 x 32
    "complex_tree": (rows_text("c64", (8, 64, 40), "size=4x32x1 stride=4x32x1", (2, 2, 40),
                               init="(0, 0)"),
                     "c64", (8, 64, 40)),
    "bf16_tree": (rows_text("bf16", (66, 24), "size=33x1 stride=33x1", (2, 24)), "bf16", (66, 24)),
    # taps in padding (skipped) on an outer dimension, a block per unit of 1100 columns
    "padded": (rows_text("f32", (9, 5, 1100), "size=5x8x1 pad=2_2x3_4x0_0", (9, 5, 1100)),
               "f32", (9, 5, 1100)),
    "base_dilated": (rows_text("f32", (6, 7, 16), "size=3x12x1 pad=1_1x5_5x0_0 lhs_dilate=2x1x1",
                               (11, 6, 16), "maximum", "-inf"), "f32", (6, 7, 16)),
    "int_product": (rows_text("s32", (40, 12), "size=36x1 stride=2x1 pad=3_0x0_0", (4, 12),
                              "multiply", "1"),
                    "s32", (40, 12)),
}


@pytest.mark.parametrize("chunks", [1, 4])
def test_long_windows_sweep_rows_with_the_interpreters_bits(chunks):
    modules = {name: parse_module(text) for name, (text, _, _) in ROWS.items()}
    specs = {name: entry_spec(m, f"k_{name}") for name, m in modules.items()}
    compiled = Compiled(list(specs.values()))
    for n, (name, (_, dtype, shape)) in enumerate(ROWS.items()):
        if dtype == "c64":
            rng = np.random.default_rng(n)
            inputs = [(rng.standard_normal(shape) + 1j * rng.standard_normal(shape))
                      .astype(np.complex64)]
        else:
            inputs = _inputs(dtype, shape, n)
        got = compiled.run(specs[name].name, inputs, chunks=chunks)
        assert_same_bits(got, reference(modules[name].entry, inputs), name)
        assert compiled.emitted.metadata.kernels[specs[name].name].segments == ("window-rows",)
