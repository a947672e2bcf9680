"""Loop-body fusion against the reference interpreter: a loop step's dynamic-update-slice
computed in one kernel with the value it writes (update-fusion), and on CUDA its small dot
reading the step's dynamic slice of the input sequence (fusion's dot-slices).

The RNN step below carries its new state and writes it into a sequence (as a scan's stacked
outputs), and reads its input through a dynamic slice; each fusion removes one kernel per
step, which the tests count against the same module compiled without it."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.passes.pipelines import CUDA_DOT_SLICES, PIPELINES

from .support.bundles import compile_bundle, kernels_json, load_emulated, variants
from .support.run import compare_with_interpreter
from .support.values import random_array

pytestmark = pytest.mark.cpu
RNG = np.random.default_rng(11)

def ten_steps(name: str, dims: dict[str, str], cell: str) -> str:
    """A while loop of ten steps over xs[i] (`x`, dims["x"]) carrying h (dims["h"]): `cell`
    computes the new state `hn` from x, h, w and u, and each hn, reshaped, is written to row
    i of a sequence [10, dims["row"]] (what a scan's stacked outputs lower to)."""
    h, row, x, w, u = (dims[k] for k in ("h", "row", "x", "w", "u"))
    state = f"(s32[], f32[{h}], f32[10,{row}], f32[10,{x}], f32[{w}], f32[{u}])"
    zeros = ", ".join(["z"] * (row.count(",") + 1))
    xzeros = ", ".join(["z"] * (x.count(",") + 1))
    return f"""HloModule {name}
body {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  h = f32[{h}] get-tuple-element(p), index=1
  seq = f32[10,{row}] get-tuple-element(p), index=2
  xs = f32[10,{x}] get-tuple-element(p), index=3
  w = f32[{w}] get-tuple-element(p), index=4
  u = f32[{u}] get-tuple-element(p), index=5
  z = s32[] constant(0)
  x3 = f32[1,{x}] dynamic-slice(xs, i, {xzeros}), dynamic_slice_sizes={{1,{x}}}
  x = f32[{x}] reshape(x3)
{cell}
  r = f32[1,{row}] reshape(hn)
  seqn = f32[10,{row}] dynamic-update-slice(seq, r, i, {zeros})
  one = s32[] constant(1)
  n = s32[] add(i, one)
  ROOT t = {state} tuple(n, hn, seqn, xs, w, u)
}}
cond {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  lim = s32[] constant(10)
  ROOT lt = pred[] compare(i, lim), direction=LT
}}
ENTRY e {{
  xs = f32[10,{x}] parameter(0)
  w = f32[{w}] parameter(1)
  u = f32[{u}] parameter(2)
  h0 = f32[{h}] parameter(3)
  zero = f32[] constant(0)
  seq0 = f32[10,{row}] broadcast(zero), dimensions={{}}
  z = s32[] constant(0)
  t = {state} tuple(z, h0, seq0, xs, w, u)
  r = {state} while(t), condition=cond, body=body
  hf = f32[{h}] get-tuple-element(r), index=1
  sf = f32[10,{row}] get-tuple-element(r), index=2
  ROOT o = (f32[{h}], f32[10,{row}]) tuple(hf, sf)
}}"""


def rnn(row: str = "4,16") -> str:
    """g = x_i w + h u, h = tanh(g[:, :16]) * tanh(g[:, 16:]) (a gated cell: its dots are
    read through slices, so they are no epilogue's), each h stacked as a row shaped `row`."""
    cell = """  xw = f32[4,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  hu = f32[4,32] dot(h, u), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  g = f32[4,32] add(xw, hu)
  a = f32[4,16] slice(g), slice={[0:4], [0:16]}
  b = f32[4,16] slice(g), slice={[0:4], [16:32]}
  ta = f32[4,16] tanh(a)
  tb = f32[4,16] tanh(b)
  hn = f32[4,16] multiply(ta, tb)"""
    return ten_steps("rnn", {"h": "4,16", "row": row, "x": "4,8", "w": "8,32", "u": "16,32"},
                     cell)


def inputs() -> list[np.ndarray]:
    """Weights small enough that a step contracts: rounding differences do not grow."""
    scales = [((10, 4, 8), 1.0), ((8, 32), 0.15), ((16, 32), 0.1), ((4, 16), 1.0)]
    return [(random_array(s, "f32", RNG) * k).astype(np.float32) for s, k in scales]


# One step's row as the state itself, and flattened (the update's index then maps onto the
# state's through a reshape that merges dims).
CASES = {"rows": (rnn(), inputs()), "flat": (rnn("64"), inputs())}


@pytest.mark.parametrize("backend", ["cpu", "cuda-emulated"])
def test_rnn_steps_match_the_interpreter(backend, tmp_path):
    compare_with_interpreter(CASES, backend, rtol=1e-4, atol=1e-5, tmp=tmp_path)


def _without(target: str, *names: str) -> str:
    """The target's -O2 pipeline without `names` (passes, or fusion's dot-slices)."""
    items = [i for i in PIPELINES[(target, 2)] if i.split("{")[0] not in names]
    if "dot-slices" in names:
        items = ["fusion" if i.startswith("fusion{dot-slices") else i for i in items]
    return ",".join(items)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_step_launches_two_kernels_fewer(case):
    text, args = CASES[case]
    fused = load_emulated(text)
    kinds = variants(fused)
    (update,) = [k for k in fused.program.kernels if k.variant == "dus.inplace"]
    assert len(update.items) == 2, "the update kernel also computes the state it writes"
    separate = load_emulated(text, passes=_without("cuda", "update-fusion"))
    assert len(separate.program.kernels) == len(fused.program.kernels) + 1
    unsliced = load_emulated(text, passes=_without("cuda", "dot-slices"))
    assert len(unsliced.program.kernels) == len(fused.program.kernels) + 1
    assert kinds["dus.inplace"] == 1
    for ex in (fused, separate, unsliced):
        got = ex.run(args)
        np.testing.assert_allclose(got[1], fused.run(args)[1], rtol=1e-6, atol=1e-7)


def test_dot_slices_only_small_dots():
    from hloc.passes import parse_spec

    assert f"fusion{{dot-slices={CUDA_DOT_SLICES}}}" in PIPELINES[("cuda", 2)]
    assert all("dot-slices" not in i for i in PIPELINES[("cpu", 2)])
    parse_spec(",".join(PIPELINES[("cuda", 3)]))  # the -O3 options merge into one spec


def test_cpu_update_segment_computes_the_state(tmp_path):
    text, _ = CASES["rows"]
    fused = kernels_json(compile_bundle(text, tmp_path / "a.bundle"))
    separate = kernels_json(compile_bundle(text, tmp_path / "b.bundle",
                                           passes=_without("cpu", "update-fusion")))
    merged = [k for k in fused["kernels"].values() if "in-place-update" in k["segments"]]
    assert [k["segments"] for k in merged] == [["in-place-update"]]
    assert merged[0]["num_outputs"] == 2
    assert len(separate["kernels"]) == len(fused["kernels"]) + 1


@pytest.mark.parametrize("items,fragment", [([0, -1], "not distinct indices"),
                                            ([0, 0], "not distinct indices"),
                                            ([0, 9], "out of range"),
                                            ([1, 0], "cannot be rebuilt")])
def test_edited_update_items_are_refused_in_one_line(tmp_path, items, fragment):
    """A tampered bundle (digests recomputed) whose update kernel names other root items:
    one line naming the bundle, exit 2, before anything runs."""
    from .trust_support import assert_refused_in_one_line, repack

    path = compile_bundle(CASES["rows"][0], tmp_path / "rnn.bundle", target="cuda")

    def edit(doc):
        (update,) = [k for k in doc["kernels"] if k["variant"] == "dus.inplace"]
        assert update["items"] == [0, 1]
        update["items"] = items

    assert_refused_in_one_line(
        repack(path, tmp_path / "bad.bundle", edit_json={"gpu_thunks.json": edit}), fragment)


def scan(batch: int, hidden: int) -> str:
    """h = tanh(x_i w + h u), every h stacked (lax.scan's outputs): the new state is a dot's
    epilogue."""
    bh = f"{batch},{hidden}"
    cell = f"""  xw = f32[{bh}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  hu = f32[{bh}] dot(h, u), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  s = f32[{bh}] add(xw, hu)
  hn = f32[{bh}] tanh(s)"""
    return ten_steps("scan", {"h": bh, "row": bh, "x": f"{batch},16", "w": f"16,{hidden}",
                              "u": f"{hidden},{hidden}"}, cell)


def scan_inputs(batch: int, hidden: int) -> list[np.ndarray]:
    shapes = [((10, batch, 16), 1.0), ((16, hidden), 0.15), ((hidden, hidden), 0.5 / hidden ** 0.5),
              ((batch, hidden), 1.0)]
    return [(random_array(s, "f32", RNG) * k).astype(np.float32) for s, k in shapes]


@pytest.mark.parametrize("batch,hidden,writer,saved", [(16, 32, "gemm.tiled", 2),
                                                      (4, 8, "dus.inplace", 1)])
def test_cuda_dot_epilogue_writes_the_update(batch, hidden, writer, saved):
    """On CUDA the update of a dot epilogue's value is written by the kernel computing it: the
    GEMM's store (dims the tiled GEMM takes; its epilogue then stays in the GEMM kernel
    instead of a kernel after a cuBLAS-able core: two kernels saved), else the update kernel
    computing the small dot once per element."""
    text, args = scan(batch, hidden), scan_inputs(batch, hidden)
    compare_with_interpreter({"scan": (text, args)}, "cuda-emulated", rtol=1e-4, atol=1e-5)
    fused = load_emulated(text)
    (kernel,) = [k for k in fused.program.kernels if len(k.items) == 2]
    assert kernel.variant == writer
    separate = load_emulated(text, passes=_without("cuda", "update-fusion"))
    assert len(separate.program.kernels) == len(fused.program.kernels) + saved
    assert "dus.inplace" not in variants(fused) or writer == "dus.inplace"
