"""The scratch of outlined fusions (a product and kernels around it, codegen/cpu/outline.py)
is planned by buffer assignment: it is in temp_bytes, the thunk's `scratch` slice and the
dumps, and the runtime allocates nothing of its own. A product whose result the fusion only
rewrites elementwise into an output of the same storage is built in the output itself."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.analysis import AliasAnalysis, Dataflow, Liveness, Timeline
from hloc.buffers import ScratchNeed, assign_buffers
from hloc.ir import Opcode
from hloc.ir.text.parser import parse_module
from hloc.runtime.cpu.memory import SCRATCH
from hloc.schedule import candidate_schedules

from .support.buffers import check_plan
from .support.bundles import compile_bundle, kernels_json, load_cpu, members
from .support.hlo import quantized_matmul
from .support.run import interpret

pytestmark = pytest.mark.cpu

# The product's f32 result is narrowed to f16: its 4-byte elements cannot be built in the
# 2-byte output, so it needs a scratch buffer.
NARROWED = """HloModule narrowed
ENTRY e {
  a = f32[200,300]{1,0} parameter(0)
  b = f32[300,256]{1,0} parameter(1)
  d = f32[200,256]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f16[200,256]{1,0} convert(d)
}
"""


def _compiled(tmp_path, text: str):
    src = tmp_path / "m.hlo"
    src.write_text(text)
    bundle = compile_bundle(src, tmp_path / "m.bundle")
    return bundle, kernels_json(bundle)["composites"], members(bundle)


def test_scratch_is_planned_counted_and_dumped(tmp_path):
    bundle, composites, files = _compiled(tmp_path, NARROWED)
    (name, composite), = composites.items()
    gemm = composite["steps"][0]
    assert gemm["kind"] == "gemm" and gemm["output"] == ["scratch", 0]
    need = 200 * 256 * 4
    assert composite["scratch_bytes"] == need
    exe = load_cpu(bundle)
    thunk = next(t for t in exe.program.sequence if t.name == name)
    (block,) = thunk.scratch
    assert block.size >= need
    assert exe.program.allocations[block.allocation].kind == "temp"
    assert exe.memory.sizes[SCRATCH] == 0  # nothing outside buffer assignment
    assert f"scratch of %{name} offset {block.offset} size {block.size}" in \
        files["buffer_assignment.txt"].decode()
    assert "scratch=(a" in files["thunks.txt"].decode()
    assert exe.bundle.manifest["memory"]["temp_bytes"] >= need
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((200, 300), np.float32), rng.standard_normal((300, 256), np.float32)]
    (got,) = exe.run(args)
    (want,) = interpret(NARROWED, args)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-2)


def test_elementwise_epilogue_is_built_in_the_output(tmp_path):
    # s32 product, dequantized to f32 of the same element size: the GEMM writes the output's
    # bytes and the epilogue converts and scales them in place.
    text = quantized_matmul("s8", 200, 300, 256)
    bundle, composites, files = _compiled(tmp_path, text)
    (composite,) = composites.values()
    assert composite["scratch_bytes"] == 0 and composite["scratch"] == []
    gemm, epilogue = composite["steps"]
    assert gemm["kind"] == "gemm" and gemm["output"] == ["output", 0]
    assert epilogue["buffers"][-2:] == [["output", 0], ["output", 0]]
    assert [0, len(epilogue["buffers"]) - 2] in [list(a) for a in epilogue["aliases"]]
    assert "scratch of" not in files["buffer_assignment.txt"].decode()
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (200, 300), dtype=np.int8)
    b = rng.integers(-128, 128, (300, 256), dtype=np.int8)
    scale = rng.random(200, dtype=np.float32)
    (got,) = load_cpu(bundle).run([a, b, scale])
    exact = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    np.testing.assert_array_equal(got, exact.astype(np.float32) * scale[:, None])


_SHARING = """HloModule sharing
ENTRY e {
  p = f32[1024]{0} parameter(0)
  x = f32[1024]{0} exponential(p)
  ROOT y = f32[1024]{0} negate(x)
}
"""


def test_scratch_need_follows_the_outputs_storage():
    # y, the entry output, takes over x's storage (x dies at y): its scratch is the `shared`
    # size; x, written apart from p, gets the `alone` one.
    module = parse_module(_SHARING)
    instrs = {i.name: i for i in module.entry.instructions}
    alias = AliasAnalysis(module, Dataflow(module))
    sequences = next(iter(candidate_schedules(module, "auto", alias).values()))
    liveness = Liveness(alias, Timeline(module, sequences))
    need = {instrs["x"]: ScratchNeed(64, 256), instrs["y"]: ScratchNeed(128, 512)}
    assignment = assign_buffers(module, alias, liveness, None, need)
    assert assignment.slice(instrs["y"]) == assignment.slice(instrs["x"])  # absorbed
    assert assignment.scratch["x"].size == 64
    assert assignment.scratch["y"].size == 512
    x_tick, y_tick = (liveness.timeline.start[instrs[n]] for n in "xy")
    assert x_tick < y_tick


def test_plans_of_outlined_fusions_pass_the_checks(tmp_path):
    from hloc.frontend import load
    from hloc.passes import PassRunner
    from hloc.passes.pipelines import default_pipeline
    from hloc.plan import plan

    src = tmp_path / "m.hlo"
    src.write_text(NARROWED)
    module = load(str(src)).module
    PassRunner(default_pipeline("cpu", 2)).run(module)
    p = plan(module, target="cpu")
    check_plan(p)
    (fusion,) = [i for i in module.entry.instructions if i.opcode == Opcode.FUSION]
    assert p.assignment.scratch[fusion.name].size == 200 * 256 * 4
    assert p.memory.temp_bytes >= 200 * 256 * 4


def _scratch_kernel(doc) -> dict:
    return next(t for t in doc["sequence"] if t["kind"] == "kernel" and t["scratch"])


def test_tampered_scratch_slices(tmp_path):
    from hloc.errors import InputError
    from hloc.runtime import load

    from .trust_support import repack

    bundle, _, _ = _compiled(tmp_path, NARROWED)

    def past(doc):
        _scratch_kernel(doc)["scratch"][0][1] = 1 << 30

    with pytest.raises(InputError, match="reaches past"):
        load(str(repack(bundle, tmp_path / "past.bundle", edit_json={"thunks.json": past})))

    def shrunk(doc):  # too small for the composite: the runtime uses scratch of its own
        _scratch_kernel(doc)["scratch"][0][2] = 64

    exe = load_cpu(repack(bundle, tmp_path / "small.bundle", edit_json={"thunks.json": shrunk}))
    assert exe.memory.sizes[SCRATCH] == 200 * 256 * 4
    args = [np.ones((200, 300), np.float32), np.full((300, 256), 0.5, np.float32)]
    (got,) = exe.run(args)
    np.testing.assert_array_equal(got, np.full((200, 256), 150, np.float16))
