"""The CPU runtime: host checks, cross-compilation, determinism, overhead, profiling,
memory binding (in-place inputs, fresh outputs) and parallel splits."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import pytest

from hloc.codegen.target import X86_LEVELS, host_target
from hloc.errors import InputError
from hloc.runtime.cpu import checks, gemm, parallel
from tests.conftest import SAMPLES, sample_arrays, sample_meta
from tests.test_interp_samples import mismatch

from .support.bundles import (
    compile_bundle,
    dumped,
    kernels_json,
    load_cpu,
    members,
    sample_bundle,
)
from .support.pools import use_pool
from .support.run import interpret, run_cases
from .support.values import assert_close

pytestmark = pytest.mark.cpu

ELEMENTWISE = """HloModule ew
ENTRY e {
  x = f32[1024]{0} parameter(0)
  y = f32[1024]{0} parameter(1)
  m = f32[1024]{0} multiply(x, y)
  e = f32[1024]{0} exponential(m)
  ROOT r = f32[1024]{0} add(e, x)
}
"""


def _sample_matches(name: str, exe) -> None:
    got = exe.run(sample_arrays(name, "inputs"))
    meta = sample_meta(name)
    for i, (g, e, d) in enumerate(zip(got, sample_arrays(name, "expected"), meta["outputs"],
                                      strict=True)):
        assert mismatch(g, e, d) is None, f"{name} out{i}: {mismatch(g, e, d)}"


# ---- host checks ------------------------------------------------------------------------------

def test_missing_cpu_feature_is_refused_before_loading(tmp_path):
    def fake(manifest):
        manifest["target"]["cpu_features"] = manifest["target"]["cpu_features"] + [
            "hloc-imaginary-feature", "avx1024"]
    bundle = compile_bundle(ELEMENTWISE, tmp_path / "f.bundle", edit_manifest=fake)
    with pytest.raises(InputError) as err:
        load_cpu(bundle)
    message = str(err.value)
    assert "\n" not in message
    assert "avx1024" in message and "hloc-imaginary-feature" in message
    assert "lacks" in message


def test_other_architecture_is_refused(tmp_path):
    def fake(manifest):
        manifest["target"]["triple"] = "aarch64-unknown-linux-gnu"
    bundle = compile_bundle(ELEMENTWISE, tmp_path / "a.bundle", edit_manifest=fake)
    with pytest.raises(InputError, match="aarch64"):
        load_cpu(bundle)


def test_unresolvable_symbol_is_refused():
    checks.check_imports(["expf", "memcpy"])
    with pytest.raises(InputError, match="hloc_no_such_symbol"):
        checks.check_imports(["hloc_no_such_symbol"])


def test_manifest_records_target(tmp_path):
    bundle = compile_bundle(ELEMENTWISE, tmp_path / "h.bundle")
    from hloc.bundle import read_bundle

    target = read_bundle(bundle).manifest["target"]
    host = host_target()
    assert target["kind"] == "cpu" and target["triple"] == host.triple
    assert target["cpu"] == host.cpu
    assert set(target["cpu_features"]) == set(host.required_features)


# ---- cross-compilation ----------------------------------------------------------------------

@pytest.mark.skipif(not host_target().is_x86, reason="x86-64 levels")
@pytest.mark.parametrize("name", ["mlp", "reductions", "dtype_zoo"])
def test_cross_compile_x86_64_v2(name, tmp_path):
    # The assembly is a dump, not a bundle member (`hloc compile --dump-dir`).
    bundle = compile_bundle(SAMPLES / f"{name}.pb", tmp_path / "v2.bundle", cpu="x86-64-v2",
                            dump_dir=tmp_path / "dump")
    from hloc.bundle import read_bundle

    target = read_bundle(bundle).manifest["target"]
    assert target["cpu"] == "x86-64-v2"
    assert set(target["cpu_features"]) <= set(X86_LEVELS["x86-64-v2"])
    asm = dumped(tmp_path / "dump", "cpu.module.s").decode()
    # SSE only: no AVX (ymm) / AVX-512 (zmm, k-masks) registers or VEX-encoded instructions.
    assert not re.search(r"%[yz]mm\d|%k[1-7]\b|\bvmov|\bvfmadd", asm)
    assert re.search(r"%xmm\d", asm)
    _sample_matches(name, load_cpu(bundle))


def test_cpu_features_flag_lowers_vector_width(tmp_path):
    bundle = compile_bundle(ELEMENTWISE, tmp_path / "f.bundle", cpu="x86-64-v4",
                            cpu_features="-avx512f", dump_dir=tmp_path / "dump")
    asm = dumped(tmp_path / "dump", "cpu.module.s").decode()
    assert "%zmm" not in asm
    x = np.linspace(-2, 2, 1024, dtype=np.float32)
    got = load_cpu(bundle).run([x, x])
    assert_close(got, interpret(ELEMENTWISE, [x, x]))


# ---- bundle contents ----------------------------------------------------------------------------

def test_bundle_is_deterministic(tmp_path):
    a = members(compile_bundle(SAMPLES / "attention.pb", tmp_path / "a.bundle"))
    b = members(compile_bundle(SAMPLES / "attention.pb", tmp_path / "b.bundle"))
    assert "cpu.0.o" in a and a.keys() == b.keys()  # compiled as several objects
    for name in a:
        assert a[name] == b[name], name


# A layer too big for a native dot kernel: its fusion becomes a composite (gemm + epilogue).
_BIG_LAYER = """
HloModule big_layer

ENTRY e {
  x = f32[256,512]{1,0} parameter(0)
  w = f32[512,256]{1,0} parameter(1)
  b = f32[256]{0} parameter(2)
  d = f32[256,256]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[256,256]{1,0} broadcast(b), dimensions={1}
  s = f32[256,256]{1,0} add(d, bb)
  ROOT t = f32[256,256]{1,0} tanh(s)
}
"""


_STOCHASTIC = """
HloModule sc

ENTRY e {
  x = f32[8]{0} parameter(0)
  r = u32[8]{0} parameter(1)
  ROOT y = bf16[8]{0} stochastic-convert(x, r)
}
"""


def test_kernels_json_lists_kernels_composites_and_fallbacks(tmp_path):
    mlp = kernels_json(sample_bundle(SAMPLES / "mlp.pb", tmp_path / "m.bundle"))
    assert mlp["kernels"] and not mlp["fallbacks"]
    big = kernels_json(compile_bundle(_BIG_LAYER, tmp_path / "b.bundle"))
    steps = [s["kind"] for c in big["composites"].values() for s in c["steps"]]
    assert "gemm" in steps and "kernel" in steps
    # stochastic-convert has no emitter lowering: a documented host fallback.
    sc = kernels_json(compile_bundle(_STOCHASTIC, tmp_path / "s.bundle"))
    assert [f["opcode"] for f in sc["fallbacks"].values()] == ["stochastic-convert"]
    assert all(f["reason"] for f in sc["fallbacks"].values())


# ---- speed of the run loop ---------------------------------------------------------------------

def _ten_kernels() -> str:
    ops = ["add", "multiply", "subtract", "maximum", "minimum"] * 2
    lines = ["HloModule ten", "ENTRY e {", "  p0 = f32[64]{0} parameter(0)",
             "  p1 = f32[64]{0} parameter(1)"]
    prev = "p0"
    for i, op in enumerate(ops):
        lines.append(f"  v{i} = f32[64]{{0}} {op}({prev}, p1)")
        prev = f"v{i}"
    lines += [f"  ROOT r = f32[64]{{0}} negate({prev})", "}"]
    return "\n".join(lines)


def test_ten_small_kernels_run_well_under_a_millisecond(tmp_path):
    text = _ten_kernels()
    bundle = compile_bundle(text, tmp_path / "t.bundle", opt_level=0)  # no fusion
    exe = load_cpu(bundle)
    assert exe.describe()["steps"] == {"driver": 1}  # one native call runs all 11 kernels
    args = [np.linspace(-1, 1, 64, dtype=np.float32), np.full(64, 0.5, np.float32)]
    assert_close(exe.run(args), interpret(text, args))
    outputs, rows = exe.run_profiled(args)  # profiling steps through the kernels one by one
    assert_close(outputs, interpret(text, args))
    assert len(rows) == 11 and {r.kind for r in rows} == {"kernel"}
    times = []
    for _ in range(300):
        start = time.perf_counter()
        exe.run(args)
        times.append(time.perf_counter() - start)
    assert statistics.median(times) < 2.5e-4, statistics.median(times)


# ---- profiling ------------------------------------------------------------------------------------

def test_profile_rows_count_loop_iterations(tmp_path):
    bundle = sample_bundle(SAMPLES / "scan_rnn.pb", tmp_path / "r.bundle")
    exe = load_cpu(bundle)
    args = sample_arrays("scan_rnn", "inputs")
    outputs, rows = exe.run_profiled(args)
    assert_close(outputs, exe.run(args), rtol=0, atol=0)
    loops = [r for r in rows if r.kind == "while"]
    assert len(loops) == 1 and loops[0].count == 1
    counts = {r.count for r in rows if r.kind != "while"}
    steps = sample_arrays("scan_rnn", "inputs")[0].shape[0]  # xs: [steps, batch, features]
    assert steps in counts  # body thunks ran once per iteration
    assert all(r.seconds >= 0 and r.ops for r in rows)
    # A second profiled run starts from zero.
    _, again = exe.run_profiled(args)
    assert max(r.count for r in again) == max(r.count for r in rows)


# ---- memory binding -------------------------------------------------------------------------------

BIG = """HloModule big
ENTRY e {
  x = f32[512,512]{1,0} parameter(0)
  y = f32[512,512]{1,0} parameter(1)
  s = f32[512,512]{1,0} add(x, y)
  t = f32[512,512]{1,0} tanh(s)
  c = f32[] constant(0)
  r = f32[512]{0} reduce(t, c), dimensions={0}, to_apply=sum
  ROOT out = (f32[512,512]{1,0}, f32[512]{0}) tuple(t, r)
}
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def test_large_inputs_in_place_and_fresh_outputs(tmp_path):
    exe = load_cpu(compile_bundle(BIG, tmp_path / "b.bundle"))
    info = exe.describe()
    assert info["in_place_inputs"] and info["fresh_outputs"]
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    first = exe.run([x, y])
    keep = [a.copy() for a in first]
    assert_close(first, interpret(BIG, [x, y]), rtol=1e-5, atol=1e-5)
    # Non-contiguous arguments (copied in) and new arrays each call.
    x2 = np.asfortranarray(rng.standard_normal((512, 512)).astype(np.float32))
    y2 = rng.standard_normal((1024, 512)).astype(np.float32)[::2]
    second = exe.run([x2, y2])
    assert_close(second, interpret(BIG, [np.ascontiguousarray(x2), np.ascontiguousarray(y2)]),
                 rtol=1e-5, atol=1e-5)
    assert_close(first, keep, rtol=0, atol=0)  # earlier results are not overwritten
    assert_close(exe.run([x, y]), keep, rtol=0, atol=0)
    np.testing.assert_array_equal(x, np.asarray(x))  # inputs are never written


def test_fresh_output_memory_is_reused_only_once_let_go(tmp_path):
    """Outputs the caller has dropped lend their memory to a later run (no new pages to
    fault in); an output, or any view of it, that the caller still holds is never written."""
    exe = load_cpu(compile_bundle(BIG, tmp_path / "b.bundle"))
    rng = np.random.default_rng(1)
    args = [[rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2)]
            for _ in range(3)]
    want = [[a.copy() for a in exe.run(arg)] for arg in args]

    def address(output):
        return output.__array_interface__["data"][0]

    held = exe.run(args[0])
    corner = held[0][:3, :3]  # a view: it keeps that output's memory lent out
    del held
    for n in range(6):  # every run's block is lent while bound, then free once let go
        got = exe.run(args[n % 3])
        assert_close(got, want[n % 3], rtol=0, atol=0)
        del got
    np.testing.assert_array_equal(corner, want[0][0][:3, :3])
    free = [b.ctypes.data for blocks in exe._output_blocks._free.values() for b in blocks]
    assert free
    got = exe.run(args[1])
    assert address(got[0]) in free  # a block let go, taken again: no new pages
    assert address(corner) not in free


MIDSIZE = """HloModule midsize
ENTRY e {
  x = f32[64,64]{1,0} parameter(0)
  y = f32[64,64]{1,0} parameter(1)
  s = f32[64,64]{1,0} add(x, y)
  t = f32[64,64]{0,1} multiply(x, y)
  n = f32[1,4]{1,0} slice(s), slice={[0:1], [0:4]}
  ROOT out = (f32[64,64]{1,0}, f32[64,64]{0,1}, f32[1,4]{1,0}) tuple(s, t, n)
}
"""


def test_midsize_outputs_are_copied_into_one_recycled_block(tmp_path):
    """Outputs under FRESH_OUTPUT_BYTES are copied out; those of POOLED_OUTPUT_BYTES or more
    share one block a run, recycled once every array viewing it is gone (malloc'd copies
    were given back to the system and faulted in again every run). Each is an array of its
    own, in logical order whatever its layout, and never written by a later run."""
    from hloc.runtime.cpu.executable import FRESH_OUTPUT_BYTES, POOLED_OUTPUT_BYTES

    assert POOLED_OUTPUT_BYTES <= 64 * 64 * 4 < FRESH_OUTPUT_BYTES
    exe = load_cpu(compile_bundle(MIDSIZE, tmp_path / "m.bundle"))
    rng = np.random.default_rng(2)
    args = [[rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2)]
            for _ in range(2)]
    want = [interpret(MIDSIZE, a) for a in args]
    first = exe.run(args[0])
    assert_close(first, want[0], rtol=0, atol=0)
    assert all(a.flags.c_contiguous and a.flags.writeable for a in first)
    first[0][:] = 7  # one output's memory is no other's
    np.testing.assert_array_equal(first[1], want[0][1])
    second = exe.run(args[1])  # `first` is held: another block
    assert_close(second, want[1], rtol=0, atol=0)
    np.testing.assert_array_equal(first[1], want[0][1])
    address = second[0].ctypes.data
    del second
    third = exe.run(args[1])  # `second` was let go: its block again
    assert third[0].ctypes.data == address
    assert third[1].ctypes.data == address + 64 * 64 * 4  # one block for both
    assert_close(third, want[1], rtol=0, atol=0)
    del third
    free = [b.ctypes.data for blocks in exe._output_blocks._free.values() for b in blocks]
    assert address in free


PRODUCTS = """HloModule products
ENTRY e {
  h = f32[32,256]{1,0} parameter(0)
  w = f32[256,256]{1,0} parameter(1)
  x = f32[4,16,16,64]{3,2,1,0} parameter(2)
  k = f32[3,3,64,64]{3,2,1,0} parameter(3)
  d = f32[32,256]{1,0} dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c = f32[4,16,16,64]{3,2,1,0} convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  ROOT out = (f32[32,256]{1,0}, f32[4,16,16,64]{3,2,1,0}) tuple(d, c)
}
"""


def test_native_products_follow_rebound_operands(tmp_path):
    # The weights (256 KiB, 144 KiB) are read in place from the caller's arrays and the
    # convolution's output (256 KiB) is a fresh array per run: the native GEMM's prebuilt
    # product lists must follow them to new addresses on every run.
    exe = load_cpu(compile_bundle(PRODUCTS, tmp_path / "p.bundle"))
    assert exe.describe()["in_place_inputs"]
    rng = np.random.default_rng(1)
    shapes = [(32, 256), (256, 256), (4, 16, 16, 64), (3, 3, 64, 64)]
    for _ in range(3):
        args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        assert_close(exe.run(args), interpret(PRODUCTS, args), rtol=1e-4, atol=1e-3)


GEMM_DRIVER = """HloModule gemm_driver
cond {
  p = (s32[], f32[16,256]{1,0}, f32[256,256]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[16,256]{1,0}, f32[256,256]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  h = f32[16,256]{1,0} get-tuple-element(p), index=1
  w = f32[256,256]{1,0} get-tuple-element(p), index=2
  d = f32[16,256]{1,0} dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[16,256]{1,0} tanh(d)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (s32[], f32[16,256]{1,0}, f32[256,256]{1,0}) tuple(j, t, w)
}
ENTRY e {
  x = f32[16,256]{1,0} parameter(0)
  w = f32[256,256]{1,0} parameter(1)
  t = f32[16,256]{1,0} tanh(x)
  d = f32[16,256]{1,0} dot(t, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = s32[] constant(0)
  init = (s32[], f32[16,256]{1,0}, f32[256,256]{1,0}) tuple(z, d, w)
  loop = (s32[], f32[16,256]{1,0}, f32[256,256]{1,0}) while(init), condition=cond, body=body
  ROOT h = f32[16,256]{1,0} get-tuple-element(loop), index=1
}
"""


def test_products_run_inside_native_drivers(tmp_path):
    """Small f32 products join native drivers (hloc_gemm_list): here the whole program, a
    loop included, is one driver; the weights are read in place from each run's array.
    (256 columns: narrower products are tiled kernels, dot.NARROW_COLUMNS.)"""
    bundle = compile_bundle(GEMM_DRIVER, tmp_path / "g.bundle", passes="layout-assignment")
    (driver,) = kernels_json(bundle)["drivers"]
    assert [s for s in driver["slots"] if s[0] == "gemm"] == [["gemm", "d.1"], ["gemm", "d"]]
    exe = load_cpu(bundle)
    assert exe.describe()["steps"] == {"driver": 1}
    rng = np.random.default_rng(2)
    for _ in range(3):
        args = [rng.standard_normal((16, 256)).astype(np.float32),
                rng.standard_normal((256, 256)).astype(np.float32) / 8]
        want = interpret(GEMM_DRIVER, args)
        assert_close(exe.run(args), want, rtol=1e-4, atol=1e-4)
        assert_close(exe.run_profiled(args)[0], want, rtol=1e-4, atol=1e-4)
    # Without the native GEMM (HLOC_CPU_GEMM=blas) the driver's thunks run one by one.
    script = ("import sys, numpy as np; from hloc.runtime import load; "
              "e = load(sys.argv[1], 'cpu'); print(e.describe()['steps']); "
              "r = np.random.default_rng(2); "
              "a = [r.standard_normal((16, 256)).astype(np.float32), "
              "r.standard_normal((256, 256)).astype(np.float32) / 8]; "
              "np.save(sys.argv[2], e.run(a)[0])")
    out = tmp_path / "blas.npy"
    done = subprocess.run([sys.executable, "-c", script, str(bundle), str(out)], text=True,
                          capture_output=True, env=dict(os.environ, HLOC_CPU_GEMM="blas"))
    assert done.returncode == 0, done.stderr
    assert "'gemm': 2" in done.stdout, done.stdout
    r = np.random.default_rng(2)
    args = [r.standard_normal((16, 256)).astype(np.float32),
            r.standard_normal((256, 256)).astype(np.float32) / 8]
    assert_close([np.load(out)], interpret(GEMM_DRIVER, args), rtol=1e-4, atol=1e-4)


BIG_LOOP = """HloModule big_loop
cond {
  p = (s32[], f32[512,1024]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[512,1024]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[512,1024]{1,0} get-tuple-element(p), index=1
  t = f32[512,1024]{1,0} tanh(x)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (s32[], f32[512,1024]{1,0}) tuple(j, t)
}
ENTRY e {
  x = f32[512,1024]{1,0} parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[512,1024]{1,0}) tuple(z, x)
  loop = (s32[], f32[512,1024]{1,0}) while(init), condition=cond, body=body
  ROOT h = f32[512,1024]{1,0} get-tuple-element(loop), index=1
}
"""


@pytest.mark.parametrize("env, in_driver", [
    ({}, True),
    ({"HLOC_CPU_THREADS": "1"}, True),
    ({"HLOC_CPU_GEMM": "blas", "HLOC_CPU_THREADS": "1"}, True),
    ({"HLOC_CPU_GEMM": "blas", "HLOC_CPU_THREADS": "2"}, False),
])
def test_big_kernels_run_inside_native_drivers_as_pool_jobs(env, in_driver, tmp_path):
    """A loop whose body holds a kernel of DRIVER_MAX_WORK or more stays one native driver:
    the kernel runs as a job of the native pool (hloc_kernel_list) where there is one, or the
    driver calls it over all its units in a one-thread process. Without a native GEMM (so no
    native pool) and with several threads, the thunks run one by one, the kernel split
    across Python's threads."""
    bundle = compile_bundle(BIG_LOOP, tmp_path / "b.bundle")
    (driver,) = kernels_json(bundle)["drivers"]
    assert [s for s in driver["slots"] if s[0] == "kernel_job"] == [["kernel_job", "t"]]
    script = ("import sys, numpy as np; from hloc.runtime import load; "
              "e = load(sys.argv[1], 'cpu'); print(e.describe()['steps']); "
              "x = np.random.default_rng(4).standard_normal((512, 1024)).astype(np.float32); "
              "np.save(sys.argv[2], e.run([x])[0])")
    out = tmp_path / "out.npy"
    done = subprocess.run([sys.executable, "-c", script, str(bundle), str(out)], text=True,
                          capture_output=True, env=dict(os.environ, **env))
    assert done.returncode == 0, done.stderr
    assert (done.stdout.strip() == "{'driver': 1}") == in_driver, done.stdout
    assert ("driver" in done.stdout) == in_driver, done.stdout
    x = np.random.default_rng(4).standard_normal((512, 1024)).astype(np.float32)
    assert_close([np.load(out)], interpret(BIG_LOOP, [x]), rtol=1e-6, atol=1e-6)


def test_wrong_argument_shape_is_a_clear_error(tmp_path):
    exe = load_cpu(compile_bundle(ELEMENTWISE, tmp_path / "e.bundle"))
    with pytest.raises(InputError, match="shape"):
        exe.run([np.zeros(1023, np.float32), np.zeros(1024, np.float32)])
    with pytest.raises(InputError, match="2 arguments"):
        exe.run([np.zeros(1024, np.float32)])


# ---- parallel splits ------------------------------------------------------------------------------

SPLIT = """HloModule split
ENTRY e {
  x = f32[1024,1024]{1,0} parameter(0)
  i = s32[] parameter(1)
  u = f32[8,1024]{1,0} parameter(2)
  z = s32[] constant(0)
  e = f32[1024,1024]{1,0} exponential(x)
  c = f32[] constant(0)
  rows = f32[1024]{0} reduce(e, c), dimensions={1}, to_apply=sum
  cols = f32[1024]{0} reduce(e, c), dimensions={0}, to_apply=sum
  d = f32[1024,1024]{1,0} dynamic-update-slice(e, u, i, z)
  ROOT out = (f32[1024]{0}, f32[1024]{0}, f32[1024,1024]{1,0}) tuple(rows, cols, d)
}
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


@pytest.mark.parametrize("native", [True, False], ids=["native-pool", "python-pool"])
def test_split_kernels_match_the_interpreter(tmp_path, monkeypatch, native):
    """Big kernels cut into unit ranges, as one job of the native pool (where the host has
    one) or through Python's threads, compute what the interpreter computes."""
    splitters = use_pool(monkeypatch, gemm, "kernel_splitter", native)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((1024, 1024)).astype(np.float32) * 0.1, np.int32(100),
            rng.standard_normal((8, 1024)).astype(np.float32)]
    o = run_cases({"case": (SPLIT, args)}, tmp=tmp_path, opt_level=0)["case"]
    got, want = o.got, o.want
    assert_close(got, want, rtol=2e-5, atol=1e-3)
    assert bool(splitters) == native  # the native runs did split through it


@pytest.mark.parametrize("extent,parts", [(1, 1), (7, 3), (8, 8), (1000, 16), (12345, 7)])
def test_native_kernel_jobs_run_every_unit_once(extent, parts):
    """hloc_kernel_job cuts [0, extent) into `parts` ranges that cover every unit exactly
    once, each passed to the kernel with the job's pointer array, shared with the pool."""
    import ctypes

    from hloc.codegen.cpu.pool import KERNEL_JOB_WORDS
    from hloc.runtime.cpu.kernels import KERNEL_TYPE

    if gemm.kernel_splitter() is None:
        pytest.skip("no native pool here (no AVX2 GEMM, or HLOC_CPU_THREADS=1)")
    job_fn, state = gemm.kernel_splitter()
    seen: list = []
    kernel = KERNEL_TYPE(lambda pointers, lo, hi: seen.append((pointers, lo, hi)))
    job = (ctypes.c_int64 * KERNEL_JOB_WORDS)(state, parts, ctypes.cast(kernel, ctypes.c_void_p).value,
                                              0xABC0, extent)
    job_fn(ctypes.c_void_p(ctypes.addressof(job)))
    assert sorted((lo, hi) for _, lo, hi in seen) == parallel.split(extent, parts)
    assert {p for p, _, _ in seen} == {0xABC0}


def test_split_ranges_cover_every_unit():
    for extent in (1, 2, 3, 7, 100, 12345):
        for parts in (1, 2, 3, 8):
            ranges = parallel.split(extent, parts)
            assert ranges[0][0] == 0 and ranges[-1][1] == extent
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
            assert all(lo < hi for lo, hi in ranges)


def test_pool_runs_every_range_once():
    pool = parallel.Pool(3)
    for parts in (1, 2, 5, 40):
        seen: list = []
        pool.run(lambda lo, hi, out=seen: out.append((lo, hi)), parallel.split(1000, parts))
        assert sorted(seen) == parallel.split(1000, parts)
    pool.run(lambda lo, hi: None, [])


# ---- native drivers ---------------------------------------------------------------------------

LOOPS = """HloModule loops
b0 {
  x = f32[8]{0} parameter(0)
  ROOT y = f32[8]{0} multiply(x, x)
}
b1 {
  x = f32[8]{0} parameter(0)
  ROOT y = f32[8]{0} negate(x)
}
b2 {
  x = f32[8]{0} parameter(0)
  h = f32[] constant(0.5)
  hh = f32[8]{0} broadcast(h), dimensions={}
  ROOT y = f32[8]{0} add(x, hh)
}
cond {
  p = (s32[], f32[8]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(11)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[8]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8]{0} get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  four = s32[] constant(4)
  k = s32[] remainder(i, four)
  c = f32[8]{0} conditional(k, x, x, x), branch_computations={b0, b1, b2}
  ROOT t = (s32[], f32[8]{0}) tuple(i2, c)
}
ENTRY e {
  x = f32[8]{0} parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[8]{0}) tuple(z, x)
  w = (s32[], f32[8]{0}) while(init), condition=cond, body=body
  y = f32[8]{0} get-tuple-element(w), index=1
  s = pred[] parameter(1)
  ROOT r = f32[8]{0} conditional(s, y, y), true_computation=b1, false_computation=b2
}
"""


@pytest.mark.parametrize("flag", [True, False])
def test_native_driver_runs_loops_and_branches(flag, tmp_path):
    """A while loop whose body picks one of three branches by index (index 3 is out of range
    and runs the last branch), then a pred conditional: all in one native driver."""
    bundle = compile_bundle(LOOPS, tmp_path / "l.bundle", passes="layout-assignment")
    assert kernels_json(bundle)["drivers"]
    exe = load_cpu(bundle)
    assert exe.describe()["steps"] == {"driver": 1}
    args = [np.linspace(-1, 1, 8, dtype=np.float32), np.bool_(flag)]
    want = interpret(LOOPS, args)
    assert_close(exe.run(args), want)
    assert_close(exe.run_profiled(args)[0], want)


def test_a_one_thread_pool_runs_big_products_on_one_blas_thread(monkeypatch):
    """HLOC_CPU_THREADS=1 (one thread per MPI rank) must not leave a big product to OpenBLAS'
    own threads, which spin on the cores the other ranks use."""
    from types import SimpleNamespace

    from hloc.runtime.cpu import blas

    threads: list[int] = []
    monkeypatch.setattr(blas, "_setter", lambda: lambda n: threads.append(n) or 2)
    monkeypatch.setattr(parallel, "pool", lambda: SimpleNamespace(threads=1))
    a, b, out = np.ones((64, 32)), np.ones((32, 48)), np.zeros((64, 48))  # f64: BLAS, not gemm.py
    run = blas.product_runner(*(SimpleNamespace(a=x) for x in (a, b, out)), None, 64, 48,
                              10 * blas.SINGLE_THREAD_FLOPS)
    run()
    assert threads == [1, 2] and (out == 32).all()  # one thread for the call, then restored


@pytest.mark.parametrize("shape,perm", [((32, 32, 32, 16), (3, 1, 2, 0)), ((5, 7, 3, 19), (3, 1, 2, 0)),
                                        ((4, 6, 9), (2, 0, 1)), ((3, 8), (1, 0)), ((10,), (0,))])
def test_strided_copy_is_copyto(shape, perm):
    """The blocked transposing copy (convolution inputs and kernels moved into place) writes
    exactly what np.copyto writes, into a padded interior as well."""
    from hloc.runtime.cpu.contract import strided_copy

    src = np.random.default_rng(0).standard_normal(shape).astype(np.float32).transpose(perm)
    want = np.zeros([d + 2 for d in src.shape], np.float32)
    got = want.copy()
    inner = tuple(slice(1, -1) for _ in src.shape)
    np.copyto(want[inner], src)
    strided_copy(got[inner], src)
    np.testing.assert_array_equal(got, want)
    back = np.zeros(shape, np.float32).transpose(perm)
    strided_copy(back, got[inner])  # into a transposed (strided) destination
    np.testing.assert_array_equal(back, src)
