"""The GPU thunk schedule: JSON round trip, text form, streams, control flow, host fallback,
and the emulator's check that it rebuilt exactly the bundled kernels."""

from __future__ import annotations

import pytest

from hloc.codegen.cuda.build import build_gpu_program, emit_recipe, ir_digest
from hloc.codegen.cuda.target import cuda_target
from hloc.compiler import CompileOptions, run_passes
from hloc.ir.text.parser import parse_module
from hloc.thunks import gpu as gt
from hloc.thunks.serialize import gpu_program_from_json as program_from_json
from hloc.thunks.serialize import gpu_program_to_json as program_to_json
from hloc.thunks.text import gpu_program_to_text as program_to_text

pytestmark = pytest.mark.cpu

MODULE = """HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
body {
  p = (s32[], f32[256]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[256] get-tuple-element(p), index=1
  e = f32[256] exponential(v)
  one = s32[] constant(1)
  n = s32[] add(i, one)
  ROOT t = (s32[], f32[256]) tuple(n, e)
}
cond {
  p = (s32[], f32[256]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  lim = s32[] constant(3)
  ROOT lt = pred[] compare(i, lim), direction=LT
}
ENTRY e {
  a = f32[256] parameter(0)
  b = f32[64,64] parameter(1)
  z = s32[] constant(0)
  t = (s32[], f32[256]) tuple(z, a)
  w = (s32[], f32[256]) while(t), condition=cond, body=body
  r = f32[256] get-tuple-element(w), index=1
  c = c64[64,64] convert(b)
  f = c64[64,64] fft(c), fft_type=FFT, fft_length={64,64}
  re = f32[64,64] real(f)
  zero = f32[] constant(0)
  s = f32[64] reduce(b, zero), dimensions={0}, to_apply=add
  ROOT out = (f32[256], f32[64,64], f32[64]) tuple(r, re, s)
}"""


def _program():
    from hloc.plan import plan

    module = parse_module(MODULE)
    run_passes(module, CompileOptions(target="cuda"), None)
    planned = plan(module, target="cuda")
    return module, build_gpu_program(module, planned.program, cuda_target())


def test_json_round_trip_and_text():
    _, built = _program()
    program = built.program
    data = program_to_json(program, {"k": {"registers": 1}})
    again, resources = program_from_json(data)
    assert again == program and resources == {"k": {"registers": 1}}
    assert program_to_json(again, resources) == data
    text = program_to_text(program)
    assert "host-to-device:" in text and "device-to-host:" in text
    assert "while" in text and "column-reduce" in text


def test_control_flow_streams_and_host_fallback():
    _, built = _program()
    program = built.program
    kinds = program.kind_counts()
    assert kinds.get("while") == 1 and kinds.get("host", 0) >= 1
    assert program.streams is not None
    assert len(program.main) == len(program.streams.streams)
    assert any("runs on the host" in n for n in program.notes)
    loop = next(t for t in program.walk() if isinstance(t, gt.While))
    assert loop.trip_count == 3


def test_recipes_rebuild_the_same_ir():
    module, built = _program()
    instructions = {i.name: i for c in module.computations for i in c.instructions}
    digests = dict(built.program.kernel_ir_sha256)
    for recipe in built.program.kernels:
        again = emit_recipe(recipe, instructions[recipe.instruction], cuda_target())
        assert ir_digest(again) == digests[recipe.name]


def test_emulator_refuses_a_changed_kernel(tmp_path):
    import json

    from hloc.bundle import read_bundle, write_bundle
    from hloc.errors import InputError
    from hloc.runtime.cuda.emulated import CudaEmulatedExecutable

    from .support.bundles import compile_bundle

    path = tmp_path / "m.bundle"
    bundle = read_bundle(str(compile_bundle(parse_module(MODULE), path, target="cuda")))
    manifest = bundle.manifest
    data = json.loads(bytes(bundle.members["gpu_thunks.json"]))
    name = data["kernels"][0]["name"]
    data["kernel_ir_sha256"][name] = "0" * 64
    members = {k: bytes(bundle.members[k]) for k in bundle.members}
    members["gpu_thunks.json"] = json.dumps(data).encode()
    manifest = {k: v for k, v in manifest.items() if k != "members"}
    write_bundle(str(path), manifest=manifest, members=members)
    with pytest.raises(InputError, match="rebuilt IR differs"):
        CudaEmulatedExecutable(read_bundle(str(path)))


def test_profiled_run_reports_thunks(tmp_path):
    import numpy as np

    from .support.bundles import load_emulated

    ex = load_emulated(parse_module(MODULE))
    args = [np.ones(256, np.float32), np.ones((64, 64), np.float32)]
    outputs, rows = ex.run_profiled(args)
    assert len(outputs) == 3 and rows
    assert {r.kind for r in rows} >= {"kernel", "host"}
    np.testing.assert_allclose(outputs[2], np.full(64, 64.0))
