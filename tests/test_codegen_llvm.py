"""Targets, the LLVM binding layer, vectorization, determinism and cross-compilation."""

from __future__ import annotations

import re

import numpy as np
import pytest

from hloc.codegen import llvm
from hloc.codegen.target import cpu_target, host_target, normalize_features
from hloc.errors import InputError
from hloc.ir.text.parser import parse_module

from .support.kernels import Compiled, emit_kernels, entry_spec, reference
from .support.values import assert_matches, assert_matches_one_of, multiply_add, random_inputs

pytestmark = pytest.mark.cpu

CHAIN = """HloModule m
ENTRY e {
  x = f32[4096,1024] parameter(0)
  y = f32[4096,1024] parameter(1)
  one = f32[] constant(1)
  ones = f32[4096,1024] broadcast(one), dimensions={}
  xy = f32[4096,1024] multiply(x, y)
  s = f32[4096,1024] add(xy, ones)
  t = f32[4096,1024] tanh(s)
  nx = f32[4096,1024] negate(x)
  e = f32[4096,1024] exponential(nx)
  ROOT r = f32[4096,1024] multiply(t, e)
}
"""

ROW_SUM = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[512,1024] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[512] reduce(x, z), dimensions={1}, to_apply=add
}
"""

COL_MAX = ROW_SUM.replace("add(a, b)", "maximum(a, b)").replace("dimensions={1}", "dimensions={0}") \
    .replace("f32[512] reduce", "f32[1024] reduce")


def _vector_widths(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"<(\d+) x float>", text)}


@pytest.mark.skipif(not host_target().has("avx512f"), reason="needs AVX-512")
@pytest.mark.parametrize("text", [CHAIN, ROW_SUM, COL_MAX], ids=["chain", "row-sum", "col-max"])
def test_loops_vectorize_to_avx512(text):
    spec = entry_spec(parse_module(text), name="k")
    out = emit_kernels([spec], host_target(), 2, assembly=True)
    assert 16 in _vector_widths(out.metadata.optimized_ir), "expected <16 x float> vector code"
    assert "zmm" in out.metadata.assembly


def test_cross_compile_to_avx2_uses_no_avx512():
    target = cpu_target("x86-64-v3")
    assert target.vector_bits == 256 and "avx512f" not in target.required_features
    spec = entry_spec(parse_module(CHAIN), name="k")
    out = emit_kernels([spec], target, 2, assembly=True)
    assert "zmm" not in out.metadata.assembly and "ymm" in out.metadata.assembly
    assert 8 in _vector_widths(out.metadata.optimized_ir)
    # The host can run AVX2 code: results still match the interpreter.
    small = parse_module(CHAIN.replace("4096,1024", "7,33"))
    spec = entry_spec(small, name="k")
    inputs = random_inputs(small.entry)
    got = Compiled([spec], target=target).run("k", inputs)[0]
    assert_matches(got, reference(small.entry, inputs)[0], rtol=2e-6, atol=1e-30)


def test_object_code_is_deterministic():
    spec = entry_spec(parse_module(CHAIN), name="k")
    a = emit_kernels([spec], host_target(), 2)
    spec2 = entry_spec(parse_module(CHAIN), name="k")
    b = emit_kernels([spec2], host_target(), 2)
    assert a.llvm_ir == b.llvm_ir
    assert a.object_code == b.object_code
    assert a.object_code[:4] == b"\x7fELF"


def test_reused_target_machines_give_the_objects_of_new_ones():
    """compile_in_context borrows its target machines from a pool: one borrower at a time,
    and an object compiled on a reused machine is the one a new machine gives."""
    target = host_target()
    text = emit_kernels([entry_spec(parse_module(CHAIN), name="k")], target, 2).llvm_ir
    pool = llvm._MachinePool()
    with pool.borrow(target, 2) as first, pool.borrow(target, 2) as second:
        assert first is not second
    with pool.borrow(target, 2) as again, pool.borrow(target, 1) as light:
        assert again in (first, second) and light not in (first, second)
    fresh = llvm.compile_ir(text, target, 2).object_code  # new machines, no pool
    reused = [llvm.compile_in_context(text, target, 2).object_code for _ in range(2)]
    assert reused == [fresh, fresh]


@pytest.mark.parametrize("opt", [0, 1, 2, 3])
def test_every_opt_level_gives_the_same_results(opt):
    """tanh(x*y + 1) * exp(-x) at every level, with x*y + 1 rounded once or twice: LLVM may
    fuse it into an FMA (as XLA CPU lets it) where the target has one, which changes the
    result where x*y + 1 cancels, and the interpreter rounds twice."""
    small = parse_module(CHAIN.replace("4096,1024", "5,40"))
    spec = entry_spec(small, name="k")
    x, y = random_inputs(small.entry, seed=opt)
    got = Compiled([spec], opt_level=opt).run("k", [x, y])[0]
    refs = [np.tanh(multiply_add(x, y, 1, fused=fused)) * np.exp(-x) for fused in (False, True)]
    assert_matches_one_of(got, refs, rtol=2e-6, atol=1e-30)
    assert_matches(refs[0], reference(small.entry, [x, y])[0], rtol=2e-6, atol=1e-30)


def test_one_object_for_several_kernels_and_metadata():
    m1, m2 = parse_module(ROW_SUM), parse_module(COL_MAX)
    specs = [entry_spec(m1, name="rows"), entry_spec(m2, name="cols")]
    out = emit_kernels(specs, host_target())
    kernels = out.metadata.kernels
    assert kernels["rows"].segments == ("loop",) and kernels["rows"].parallel_extent == 64
    assert kernels["cols"].segments == ("column-reduce",)
    assert kernels["cols"].parallel_extent == 2  # 1024 columns: two units for two threads
    lib = llvm.JitLibrary(out.object_code)
    assert lib.address("rows") and lib.address("cols")
    with pytest.raises(KeyError):
        lib.address("nope")
    assert out.metadata.to_json()["kernels"][0]["name"] == "rows"


def test_flush_to_zero_state_is_restored():
    """Kernels set FTZ/DAZ only while they run (numpy afterwards still sees denormals)."""
    small = parse_module(CHAIN.replace("4096,1024", "3,3"))
    spec = entry_spec(small, name="k")
    Compiled([spec]).run("k", random_inputs(small.entry))
    tiny = np.float32(1e-45)
    assert tiny * np.float32(1.0) != 0


def test_target_parsing():
    assert normalize_features("+b,-a,+b") == "-a,+b"
    with pytest.raises(InputError):
        normalize_features("avx2")
    with pytest.raises(InputError):
        cpu_target("no-such-cpu")
    host = host_target()
    assert cpu_target() == host
    assert host.describe()["triple"] == host.triple
    assert cpu_target(features="-avx512f").vector_bits <= 256


def test_invalid_ir_is_reported():
    from hloc.errors import CheckFailed

    with pytest.raises(CheckFailed):
        llvm.parse("define void @f( {")


SMALL_DOT = """HloModule sd
ENTRY main {
  a = f32[32,64]{1,0} parameter(0)
  b = f32[64,96]{1,0} parameter(1)
  ROOT d = f32[32,96]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64-v4"])
def test_small_dot_step_keeps_its_tile_in_registers(cpu):
    """A 2 x 6-vector tile keeps its 12 accumulators in registers on both levels: with 16 ymm
    registers the step goes chunk by chunk (two broadcasts live, not six rhs vectors)."""
    target = cpu_target(cpu)
    assert target.vector_registers == (16 if cpu == "x86-64-v3" else 32)
    out = emit_kernels([entry_spec(parse_module(SMALL_DOT), name="k")], target, 2,
                       assembly=True)
    blocks = [blk for blk in re.split(r"\n\.LBB\w+:", out.metadata.assembly)
              if len(re.findall(r"vfmadd\w+\s+", blk)) >= 6]
    assert blocks and not any("(%rsp)" in blk for blk in blocks)


def test_small_maps_are_light_and_small_loops_are_not():
    """Small kernels that only map over their outputs get the light passes
    (llvm.SMALL_KERNEL_PASSES); a small reduction keeps the -O pipeline (its inner loop
    wants unrolling and LICM), and so does a map with enough work."""
    from .support.kernels import build_llvm_module

    small_map = entry_spec(parse_module(CHAIN.replace("4096,1024", "16,8")), "small_map")
    big_map = entry_spec(parse_module(CHAIN), "big_map")
    small_sum = entry_spec(parse_module(ROW_SUM.replace("512,1024", "8,16")
                                        .replace("f32[512]", "f32[8]")), "small_sum")
    _, _, light = build_llvm_module([small_map, big_map, small_sum], host_target())
    assert light & {"small_map", "big_map", "small_sum"} == {"small_map"}  # (and .body)
    out = Compiled([small_map, small_sum])
    for spec in (small_map, small_sum):
        args = random_inputs(spec.computation, 3)
        assert_matches(out.run(spec.name, args)[0], reference(spec.computation, args)[0],
                       rtol=1e-6, atol=1e-6, what=spec.name)


LOOPED_MAP = """HloModule m
cond {
  p = (s32[], f32[16,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(50)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[16,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  h = f32[16,8] get-tuple-element(p), index=1
  gate = f32[16,8] tanh(h)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (s32[], f32[16,8]) tuple(j, gate)
}
ENTRY e {
  x = f32[16,8] parameter(0)
  pre = f32[16,8] tanh(x)
  z = s32[] constant(0)
  init = (s32[], f32[16,8]) tuple(z, pre)
  loop = (s32[], f32[16,8]) while(init), condition=cond, body=body
  ROOT h = f32[16,8] get-tuple-element(loop), index=1
}
"""


def test_small_kernels_of_a_loop_body_keep_the_full_pipeline(tmp_path):
    """A small map that runs 50 times inside a while loop counts its work 50 times, so it is
    neither `optsize` nor light there (an LSTM's gate kernels took 14 ms a run scalar, 8
    vectorized); the same map before the loop is, and so is the loop's scalar counter."""
    from .support.bundles import compile_bundle, dumped, load_cpu
    from .support.run import interpret

    bundle = compile_bundle(LOOPED_MAP, tmp_path / "m.bundle", dump_dir=tmp_path / "dump")
    ir_text = dumped(tmp_path / "dump", "cpu.module.ll").decode()
    heads = {m[1]: m[2] for m in re.finditer(r'define [^@]*@"?(hloc_[\w.]+)"?\((.*)', ir_text)}
    looped = [name for name in heads if name.startswith("hloc_gate")]
    outside = [name for name in heads if name.startswith(("hloc_pre", "hloc_j"))]
    assert looped and len(outside) >= 2, sorted(heads)
    assert all("optsize" not in heads[name] for name in looped), {n: heads[n] for n in looped}
    assert all("optsize" in heads[name] for name in outside), {n: heads[n] for n in outside}
    x = np.linspace(-2, 2, 128, dtype=np.float32).reshape(16, 8)
    assert_matches(load_cpu(bundle).run([x])[0], interpret(LOOPED_MAP, [x])[0],
                   rtol=1e-5, atol=1e-6, what="loop")
