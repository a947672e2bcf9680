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
from hloc.thunks.base import ThunkKind, walk

from .support.bundles import compile_bundle, kernels_json, load_emulated, variants
from .support.run import compare_with_interpreter
from .support.values import random_array

pytestmark = pytest.mark.cpu
RNG = np.random.default_rng(11)

def ten_steps(name: str, dims: dict[str, str], cell: str) -> str:
    """A while loop of ten steps over xs[i] (`x`, dims["x"]) carrying h (dims["h"]): `cell`
    computes the new state `hn` from x, h, w and u, and each hn, reshaped, is written to row
    i of a sequence [10, dims["row"]] (what a scan's stacked outputs lower to). With
    dims["c"], the loop also carries a cell state c, which `cell` turns into `cn`."""
    h, row, x, w, u = (dims[k] for k in ("h", "row", "x", "w", "u"))
    c = dims.get("c")
    carried = f", f32[{c}]" if c else ""
    state = f"(s32[], f32[{h}], f32[10,{row}], f32[10,{x}], f32[{w}], f32[{u}]{carried})"
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
{f"  c = f32[{c}] get-tuple-element(p), index=6" if c else ""}
  z = s32[] constant(0)
  x3 = f32[1,{x}] dynamic-slice(xs, i, {xzeros}), dynamic_slice_sizes={{1,{x}}}
  x = f32[{x}] reshape(x3)
{cell}
  r = f32[1,{row}] reshape(hn)
  seqn = f32[10,{row}] dynamic-update-slice(seq, r, i, {zeros})
  one = s32[] constant(1)
  n = s32[] add(i, one)
  ROOT t = {state} tuple(n, hn, seqn, xs, w, u{", cn" if c else ""})
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
{f"  c0 = f32[{c}] parameter(4)" if c else ""}
  zero = f32[] constant(0)
  seq0 = f32[10,{row}] broadcast(zero), dimensions={{}}
  z = s32[] constant(0)
  t = {state} tuple(z, h0, seq0, xs, w, u{", c0" if c else ""})
  r = {state} while(t), condition=cond, body=body
  hf = f32[{h}] get-tuple-element(r), index=1
  sf = f32[10,{row}] get-tuple-element(r), index=2
{f"  cf = f32[{c}] get-tuple-element(r), index=6" if c else ""}
  ROOT o = (f32[{h}], f32[10,{row}]{carried}) tuple(hf, sf{", cf" if c else ""})
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


def lstm() -> str:
    """An LSTM cell: g = x_i w + h u, c = sigmoid(f) c + sigmoid(i) tanh(z), h = sigmoid(o)
    tanh(c), each h stacked. c's new value, a kernel of its own after fusion, overwrites the
    old one in place; update-fusion moves it into the update's kernel, whose pass over the
    update's elements computes c, h and the row at each index (sharing.in_update_pass)."""
    gate = "f32[4,16] slice(g), slice={{[0:4], [{0}:{1}]}}"
    cell = f"""  xw = f32[4,64] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  hu = f32[4,64] dot(h, u), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  g = f32[4,64] add(xw, hu)
  gi = {gate.format(0, 16)}
  gf = {gate.format(16, 32)}
  gz = {gate.format(32, 48)}
  go = {gate.format(48, 64)}
  si = f32[4,16] logistic(gi)
  sf = f32[4,16] logistic(gf)
  tz = f32[4,16] tanh(gz)
  so = f32[4,16] logistic(go)
  kept = f32[4,16] multiply(sf, c)
  added = f32[4,16] multiply(si, tz)
  cn = f32[4,16] add(kept, added)
  tc = f32[4,16] tanh(cn)
  hn = f32[4,16] multiply(so, tc)"""
    return ten_steps("lstm", {"h": "4,16", "row": "4,16", "x": "4,8", "w": "8,64",
                              "u": "16,64", "c": "4,16"}, cell)


def lstm_inputs() -> list[np.ndarray]:
    scales = [((10, 4, 8), 1.0), ((8, 64), 0.15), ((16, 64), 0.1), ((4, 16), 1.0),
              ((4, 16), 1.0)]
    return [(random_array(s, "f32", RNG) * k).astype(np.float32) for s, k in scales]


@pytest.mark.parametrize("backend", ["cpu", "cuda-emulated"])
def test_lstm_steps_match_the_interpreter(backend, tmp_path):
    compare_with_interpreter({"lstm": (lstm(), lstm_inputs())}, backend, rtol=1e-4, atol=1e-5,
                             tmp=tmp_path)


def test_lstm_cell_state_is_updated_in_the_update_kernel(tmp_path):
    """One kernel fewer a step on CUDA and on the CPU, and still no copy in the loop: the
    merged kernel's new c overwrites the old c (buffer assignment shares them)."""
    text = lstm()
    fused = load_emulated(text)
    (update,) = [k for k in fused.program.kernels if k.variant == "dus.inplace"]
    assert len(update.items) == 3, "the update kernel also computes h and c"
    separate = load_emulated(text, passes=_without("cuda", "update-fusion"))
    assert len(separate.program.kernels) == len(fused.program.kernels) + 2
    for ex in (fused, separate):
        (loop,) = [t for t in ex.program.walk() if t.kind == ThunkKind.WHILE]
        assert not [t for t in walk(loop.body) if t.thunk.kind == ThunkKind.COPY], \
            "a copy back into c"
    cpu = kernels_json(compile_bundle(text, tmp_path / "a.bundle"))
    cpu_separate = kernels_json(compile_bundle(text, tmp_path / "b.bundle",
                                               passes=_without("cpu", "update-fusion")))
    merged = [k for k in cpu["kernels"].values() if "in-place-update" in k["segments"]]
    assert [(k["segments"], k["num_outputs"]) for k in merged] == [(["in-place-update"], 3)]
    assert len(cpu_separate["kernels"]) == len(cpu["kernels"]) + 2


# A loop fusion as update-fusion could leave it, written out so that its outputs come in the
# order that would expose a kernel storing an item before the others read its operand: cn
# overwrites c (sharing.can_share_operand), and dn and the update read c after it.
PASS_ORDER = """HloModule pass_order
fused {
  seq = f32[10,4,16] parameter(0)
  c = f32[4,16] parameter(1)
  i = s32[] parameter(2)
  one = f32[] constant(1)
  ones = f32[4,16] broadcast(one), dimensions={}
  cn = f32[4,16] add(c, ones)
  dn = f32[4,16] multiply(c, c)
  t = f32[4,16] tanh(c)
  r = f32[1,4,16] reshape(t)
  z = s32[] constant(0)
  up = f32[10,4,16] dynamic-update-slice(seq, r, i, z, z)
  ROOT out = (f32[10,4,16], f32[4,16], f32[4,16]) tuple(up, cn, dn)
}
body {
  p = (s32[], f32[4,16], f32[4,16], f32[10,4,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  c = f32[4,16] get-tuple-element(p), index=1
  seq = f32[10,4,16] get-tuple-element(p), index=3
  f = (f32[10,4,16], f32[4,16], f32[4,16]) fusion(seq, c, i), kind=kLoop, calls=fused
  seqn = f32[10,4,16] get-tuple-element(f), index=0
  cn = f32[4,16] get-tuple-element(f), index=1
  dn = f32[4,16] get-tuple-element(f), index=2
  one = s32[] constant(1)
  n = s32[] add(i, one)
  ROOT t = (s32[], f32[4,16], f32[4,16], f32[10,4,16]) tuple(n, cn, dn, seqn)
}
cond {
  p = (s32[], f32[4,16], f32[4,16], f32[10,4,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  lim = s32[] constant(10)
  ROOT lt = pred[] compare(i, lim), direction=LT
}
ENTRY e {
  c0 = f32[4,16] parameter(0)
  zero = f32[] constant(0)
  d0 = f32[4,16] broadcast(zero), dimensions={}
  seq0 = f32[10,4,16] broadcast(zero), dimensions={}
  z = s32[] constant(0)
  t = (s32[], f32[4,16], f32[4,16], f32[10,4,16]) tuple(z, c0, d0, seq0)
  r = (s32[], f32[4,16], f32[4,16], f32[10,4,16]) while(t), condition=cond, body=body
  cf = f32[4,16] get-tuple-element(r), index=1
  df = f32[4,16] get-tuple-element(r), index=2
  sf = f32[10,4,16] get-tuple-element(r), index=3
  ROOT o = (f32[4,16], f32[4,16], f32[10,4,16]) tuple(cf, df, sf)
}
"""


@pytest.mark.parametrize("backend", ["cpu", "cuda-emulated"])
def test_update_pass_computes_every_value_before_it_stores(backend, tmp_path):
    args = [random_array((4, 16), "f32", RNG)]
    outcome = compare_with_interpreter({"order": (PASS_ORDER, args)}, backend, rtol=1e-6,
                                       atol=1e-6, tmp=tmp_path, passes="layout-assignment")
    if backend == "cuda-emulated":
        (update,) = [k for k in outcome["order"].artifact.program.kernels
                     if k.variant == "dus.inplace"]
        assert len(update.items) == 3


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
