"""Integer dots on the CPU: 8- and 16-bit products accumulated in 32 bits, two contracting
steps at a time through pmaddwd (hloc/codegen/cpu/dot.py `paired`), and integer dots fused
with an epilogue (a composite whose product step is a dot kernel, hloc/codegen/cpu/outline.py),
each exactly equal to the reference interpreter for every x86-64 level the bundle targets."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.codegen.cpu.dot import SMALL_DOT_WORK
from hloc.codegen.target import cpu_target, host_target

from .support.bundles import compile_bundle, kernels_json, load_cpu, members
from .support.hlo import quantized_matmul
from .support.run import run_cases

pytestmark = pytest.mark.cpu

_NP = {"s8": np.int8, "u8": np.uint8, "s16": np.int16, "u16": np.uint16, "s32": np.int32}
LC1_RC0 = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
# (cpu, the pmaddwd intrinsic its widest accumulators use; None: derived from the host)
LEVELS = [("x86-64", "llvm.x86.sse2.pmadd.wd"), ("x86-64-v3", "llvm.x86.avx2.pmadd.wd"),
          (None, None)]


def _module(lhs: str, rhs: str, out: str, dims: str) -> str:
    return (f"HloModule d\nENTRY e {{\n  a = {lhs} parameter(0)\n  b = {rhs} parameter(1)\n"
            f"  ROOT d = {out} dot(a, b), {dims}\n}}\n")


def _random(dtype: str, dims: list[int], rng) -> np.ndarray:
    info = np.iinfo(_NP[dtype])
    x = rng.integers(info.min, info.max, dims, endpoint=True).astype(_NP[dtype])
    flat = x.reshape(-1)
    flat[: min(flat.size, 7)] = info.min  # the extremes: min * min pairs wrap in pmaddwd
    return x


def _widest(cpu: str | None) -> str:
    target = cpu_target(cpu)
    if target.has("avx512bw"):
        return "llvm.x86.avx512.pmaddw.d.512"
    return "llvm.x86.avx2.pmadd.wd" if target.has("avx2") else "llvm.x86.sse2.pmadd.wd"


PAIRED = [  # lhs, rhs, out, dimension numbers
    # odd depth (a last step alone), row and column tails
    ("s8[37,203]", "s8[203,45]", "s32[37,45]", LC1_RC0),
    ("u8[9,64]", "s8[64,70]", "s32[9,70]", LC1_RC0),
    ("u8[5,33]", "u8[33,17]", "s32[5,17]", LC1_RC0),
    ("s16[6,50]", "s16[50,40]", "s32[6,40]", LC1_RC0),
    # rhs contracted over its minor dimension: columns read element by element
    ("s8[7,30]", "s8[21,30]", "s32[7,21]", "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
    # batch dimensions; two contracting dimensions (pairs along the last)
    ("s8[2,5,12]", "s8[2,12,19]", "s32[2,5,19]",
     "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"),
    ("s8[4,3,5]", "s8[3,5,20]", "s32[4,20]", "lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}"),
]


def _operand(shape_text: str, rng) -> np.ndarray:
    dtype, dims = shape_text.rstrip("]").split("[")
    return _random(dtype, [int(d) for d in dims.split(",")], rng)


@pytest.mark.parametrize("cpu,intrinsic", LEVELS, ids=[c or "host" for c, _ in LEVELS])
@pytest.mark.parametrize("lhs,rhs,out,dims", PAIRED, ids=[f"{c[0]}x{c[1]}" for c in PAIRED])
def test_narrow_integer_products_go_in_pairs(lhs, rhs, out, dims, cpu, intrinsic, tmp_path):
    rng = np.random.default_rng(11)
    args = [_operand(lhs, rng), _operand(rhs, rng)]
    o = run_cases({"case": (_module(lhs, rhs, out, dims), args)}, tmp=tmp_path, cpu=cpu,
                  passes="layout-assignment")["case"]
    np.testing.assert_array_equal(o.got[0], o.want[0])
    ir_text = members(o.artifact)["module.ll"].decode()
    assert (intrinsic or _widest(cpu)) in ir_text


def test_avx512_without_bw_goes_one_by_one(tmp_path):
    """AVX-512F without BW has 16-lane i32 chunks but no 512-bit pmaddwd: the products go
    one by one (pairing them built a 32-element shuffle for a 16-lane vector). Compiled on
    any host; run where the host has AVX-512F."""
    rng = np.random.default_rng(14)
    args = [_random("s8", [9, 40], rng), _random("s8", [40, 33], rng)]
    text = _module("s8[9,40]", "s8[40,33]", "s32[9,33]", LC1_RC0)
    bundle = compile_bundle(text, tmp_path / "m.bundle", cpu="x86-64-v4",
                            cpu_features="-avx512bw", passes="layout-assignment")
    assert "pmadd" not in members(bundle)["module.ll"].decode()
    if host_target().has("avx512f"):
        np.testing.assert_array_equal(load_cpu(bundle).run(args)[0],
                                      args[0].astype(np.int32) @ args[1].astype(np.int32))


@pytest.mark.parametrize("lt,rt", [("s32", "s32"), ("u16", "s8")])
def test_other_integer_products_go_one_by_one(lt, rt, tmp_path):
    """32-bit operands, and unsigned 16-bit ones (no signed 16-bit pair holds them), keep
    one multiply-add per step."""
    rng = np.random.default_rng(12)
    args = [_random(lt, [6, 9], rng), _random(rt, [9, 10], rng)]
    text = _module(f"{lt}[6,9]", f"{rt}[9,10]", "s32[6,10]", LC1_RC0)
    o = run_cases({"case": (text, args)}, tmp=tmp_path, passes="layout-assignment")["case"]
    np.testing.assert_array_equal(o.got[0], o.want[0])
    assert "pmadd" not in members(o.artifact)["module.ll"].decode()


QUANTIZED = quantized_matmul("s16", 96, 256, 80)


def test_fused_integer_dot_is_a_kernel_step(tmp_path):
    """An int16 product with its dequantizing epilogue, too big to be computed inside the
    fused kernel: the composite's product step is a dot kernel (it was the reference
    interpreter: numpy's integer matmul, 370x XLA's time on a 512 x 1024 x 1024 int8 product;
    int8 ones now take the native GEMM's int8 form: tests/test_cpu_gemm_int8.py)."""
    assert 96 * 80 * 256 >= SMALL_DOT_WORK
    rng = np.random.default_rng(13)
    args = [_random("s16", [96, 256], rng), _random("s16", [256, 80], rng),
            rng.uniform(0.01, 0.02, 96).astype(np.float32)]
    o = run_cases({"case": (QUANTIZED, args)}, tmp=tmp_path)["case"]
    np.testing.assert_array_equal(o.got[0], o.want[0])
    (composite,) = kernels_json(o.artifact)["composites"].values()
    kinds = [(s["kind"], s.get("segments")) for s in composite["steps"]]
    assert kinds[0] == ("kernel", ["dot"]) and all(kind == "kernel" for kind, _ in kinds), kinds
