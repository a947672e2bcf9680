"""Native CPU sort and top-k kernels (hloc/codegen/cpu/sort.py, topk.py) against the reference
interpreter: element types, comparators, sort dimensions, edge sizes, long and threaded rows,
in-place sorts, and XLA's outputs for the samples that sort."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.codegen.cpu import KernelSpec
from hloc.codegen.target import host_target
from hloc.ir import Opcode, dtypes
from hloc.ir.text.parser import parse_module
from tests.conftest import SAMPLES, require_samples, sample_arrays

from .support.bundles import compile_bundle, kernels_json, load_cpu, sample_bundle
from .support.kernels import LoadedKernels, emit_kernels
from .support.run import compare_with_interpreter, interpret
from .support.values import assert_same_bits

pytestmark = pytest.mark.cpu

LT, GT = "direction=LT", "direction=GT"
TOTAL = "direction=LT, type=TOTALORDER"


# ---- modules -----------------------------------------------------------------------------------

def comparator(types: list[str], body: list[str]) -> str:
    """%cmp over one (a_k, b_k) parameter pair per operand type; `body` ends in ROOT."""
    params = ", ".join(f"{s}{k}: {t}[]" for k, t in enumerate(types) for s in "ab")
    lines = [f"  %{s}{k} = {t}[] parameter({2 * k + j})"
             for k, t in enumerate(types) for j, s in enumerate("ab")]
    return f"%cmp ({params}) -> pred[] {{\n" + "\n".join(lines + body) + "\n}\n"


def compare_first(attrs: str) -> list[str]:
    return [f"  ROOT %r = pred[] compare(%a0, %b0), {attrs}"]


def lexicographic() -> list[str]:
    """Key 0 ascending, then key 1 descending (operand 2 is payload)."""
    return [f"  %lt0 = pred[] compare(%a0, %b0), {LT}", "  %eq0 = pred[] compare(%a0, %b0), direction=EQ",
            f"  %gt1 = pred[] compare(%a1, %b1), {GT}", "  %and = pred[] and(%eq0, %gt1)",
            "  ROOT %r = pred[] or(%lt0, %and)"]


def sort_text(types: list[str], dims: tuple[int, ...], dim: int, body: list[str]) -> str:
    shape = [f"{t}[{','.join(map(str, dims))}]" for t in types]
    params = ", ".join(f"p{k}: {s}" for k, s in enumerate(shape))
    lines = [f"  %p{k} = {s} parameter({k})" for k, s in enumerate(shape)]
    out = shape[0] if len(shape) == 1 else f"({', '.join(shape)})"
    args = ", ".join(f"%p{k}" for k in range(len(shape)))
    lines.append(f"  ROOT %s = {out} sort({args}), dimensions={{{dim}}}, is_stable=true, "
                 f"to_apply=%cmp")
    return ("HloModule m\n\n" + comparator(types, body)
            + f"\nENTRY %main ({params}) -> {out} {{\n" + "\n".join(lines) + "\n}\n")


# ---- running -----------------------------------------------------------------------------------

def run_native(text: str, args, tmp_path, segment: str, count: int = 1) -> None:
    """Compare with the interpreter bit for bit on the CPU, and check that `count` kernels of
    `segment` were emitted (no host steps)."""
    (outcome,) = compare_with_interpreter({segment: (text, args)}, tmp=tmp_path,
                                          bits=True).values()
    kernels = kernels_json(outcome.artifact)["kernels"].values()
    assert sum(segment in k["segments"] for k in kernels) == count


def values(t: str, shape, rng, distinct: int | None = None) -> np.ndarray:
    """Random values of type `t` (few distinct ones when `distinct`: many ties)."""
    dt = dtypes.to_numpy(dtypes.from_name(t))
    n = int(np.prod(shape))
    if t == "pred":
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        hi = min(int(info.max), distinct or int(info.max))
        return rng.integers(max(int(info.min), -hi), hi, shape, endpoint=True).astype(dt)
    x = rng.standard_normal(n) * 100
    if distinct:
        x = np.round(x) % distinct
    return x.astype(np.float32).astype(dt).reshape(shape)


def float_edges(shape, rng) -> np.ndarray:
    edges = [np.nan, -np.nan, np.copysign(np.nan, -1), 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0,
             3.5, 1e30, -1e30]
    return rng.choice(np.array(edges, np.float32), size=shape)


# ---- sorts -------------------------------------------------------------------------------------

@pytest.mark.parametrize("t, attrs", [("f32", LT), ("f32", TOTAL), ("f64", GT), ("bf16", LT),
                                      ("f16", TOTAL), ("s32", GT), ("u8", LT), ("s8", LT),
                                      ("u64", GT), ("pred", LT)])
def test_element_types(t, attrs, tmp_path):
    rng = np.random.default_rng(1)
    x = values(t, (5, 37), rng, distinct=9)
    run_native(sort_text([t], (5, 37), 1, compare_first(attrs)), [x], tmp_path, "sort")


def test_float_total_order_with_nan_zero_inf(tmp_path):
    rng = np.random.default_rng(2)
    x = float_edges((4, 50), rng)
    iota = np.broadcast_to(np.arange(50, dtype=np.int32), (4, 50)).copy()
    for attrs in (TOTAL, "direction=GT, type=TOTALORDER"):
        run_native(sort_text(["f32", "s32"], (4, 50), 1, compare_first(attrs)), [x, iota],
                   tmp_path, "sort")


def test_float_lt_keeps_signed_zeros_in_order(tmp_path):
    # FLOAT order: -0 == +0, so they keep their original order (stable).
    x = np.array([[0.0, -0.0, 1.0, -0.0, 0.0, -np.inf, np.inf, -1.0]] * 3, np.float32)
    run_native(sort_text(["f32"], x.shape, 1, compare_first(LT)), [x], tmp_path, "sort")


def test_multi_operand_lexicographic(tmp_path):
    rng = np.random.default_rng(3)
    args = [values("f32", (6, 90), rng, 5), values("s32", (6, 90), rng, 4),
            values("f32", (6, 90), rng)]
    text = sort_text(["f32", "s32", "f32"], (6, 90), 1, lexicographic())
    run_native(text, args, tmp_path, "sort")


def test_custom_comparator_is_stable(tmp_path):
    # |a| < |b| (not a plain key compare: the interpreter's merge sort path); many ties.
    rng = np.random.default_rng(4)
    x = values("s32", (3, 200), rng, distinct=6)
    iota = np.broadcast_to(np.arange(200, dtype=np.int32), (3, 200)).copy()
    body = ["  %x = s32[] abs(%a0)", "  %y = s32[] abs(%b0)",
            f"  ROOT %r = pred[] compare(%x, %y), {LT}"]
    run_native(sort_text(["s32", "s32"], (3, 200), 1, body), [x, iota], tmp_path, "sort")


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_sort_dimensions(dim, tmp_path):
    rng = np.random.default_rng(5 + dim)
    shape = (7, 5, 19)
    args = [values("f32", shape, rng, 6), values("s32", shape, rng)]
    run_native(sort_text(["f32", "s32"], shape, dim, compare_first(LT)), args, tmp_path, "sort")


@pytest.mark.parametrize("shape, dim", [((0, 5), 1), ((4, 0), 1), ((6, 1), 1), ((1,), 0),
                                        ((3, 17), 0)])
def test_edge_sizes(shape, dim, tmp_path):
    rng = np.random.default_rng(6)
    args = [values("f32", shape, rng, 4), values("s32", shape, rng)]
    text = sort_text(["f32", "s32"], shape, dim, compare_first(GT))
    bundle = compile_bundle(text, tmp_path / "m.bundle")
    want = interpret(text, args)
    if 0 in shape:  # sorting nothing is the identity
        assert_same_bits(want, args)
    assert_same_bits(load_cpu(bundle).run(args), want)


def test_long_rows_through_heap_scratch(tmp_path):
    rng = np.random.default_rng(7)
    args = [values("f32", (2, 100_000), rng, 1000), values("s32", (2, 100_000), rng)]
    run_native(sort_text(["f32", "s32"], (2, 100_000), 1, compare_first(LT)), args, tmp_path,
               "sort")


def test_many_rows_split_across_threads(tmp_path):
    # Enough work for the runtime's thread pool; the rows are the units it splits.
    rng = np.random.default_rng(8)
    x = values("f32", (100, 3000), rng, 50)
    text = sort_text(["f32"], x.shape, 1, compare_first(GT))
    bundle = compile_bundle(text, tmp_path / "m.bundle")
    (kernel,) = kernels_json(bundle)["kernels"].values()
    assert kernel["parallel_extent"] == 100
    assert_same_bits(load_cpu(bundle).run([x]), interpret(text, [x]))


def test_sort_in_place_in_the_runtime(tmp_path):
    # The negated operand is dead after the sort: the buffer assignment sorts it in place.
    text = ("HloModule m\n\n" + comparator(["f32"], compare_first(LT)) +
            "\nENTRY %main (p: f32[8,300]) -> f32[8,300] {\n  %p = f32[8,300] parameter(0)\n"
            "  %n = f32[8,300] negate(%p)\n  %s = f32[8,300] sort(%n), dimensions={1}, "
            "is_stable=true, to_apply=%cmp\n  ROOT %r = f32[8,300] multiply(%s, %s)\n}\n")
    bundle = compile_bundle(text, tmp_path / "m.bundle")
    sorts = [k for k in kernels_json(bundle)["kernels"].values() if "sort" in k["segments"]]
    assert sorts and sorts[0]["aliases"] == [[0, 0]]
    x = values("f32", (8, 300), np.random.default_rng(9), 30)
    assert_same_bits(load_cpu(bundle).run([x]), interpret(text, [x]))


@pytest.mark.parametrize("n", [40, 20_000])
def test_in_place_kernel_in_chunks(n):
    # Every output shares its operand's buffer; chunks stand for threads' unit ranges.
    text = sort_text(["f32", "s32"], (6, n), 1, lexicographic())
    module = parse_module(text)
    spec = KernelSpec.for_instruction(module.entry.root, "sort_in_place", aliases=((0, 0), (1, 1)))
    target = host_target()
    loaded = LoadedKernels(emit_kernels([spec], target), target)
    rng = np.random.default_rng(10)
    args = [values("f32", (6, n), rng, 7), values("s32", (6, n), rng, 9)]
    assert_same_bits(loaded.run(spec, args, chunks=4), interpret(text, args))


# ---- top-k -------------------------------------------------------------------------------------

def topk_text(t: str, dims: tuple[int, ...], k: int, largest: bool) -> str:
    shape = f"{t}[{','.join(map(str, dims))}]"
    out_dims = ",".join(map(str, dims[:-1] + (k,)))
    out = f"({t}[{out_dims}], s32[{out_dims}])"
    return (f"HloModule m\n\nENTRY %main (x: {shape}) -> {out} {{\n  %x = {shape} parameter(0)\n"
            f"  ROOT %t = {out} topk(%x), k={k}, largest={'true' if largest else 'false'}\n}}\n")


@pytest.mark.parametrize("t", ["f32", "bf16", "f64", "s32", "u8"])
@pytest.mark.parametrize("k", [1, 5, 100, 150])
@pytest.mark.parametrize("largest", [True, False])
def test_topk(t, k, largest, tmp_path):
    rng = np.random.default_rng(11)
    x = values(t, (3, 150), rng, distinct=40)  # ties: the lower index goes first
    run_native(topk_text(t, (3, 150), k, largest), [x], tmp_path, "topk")


@pytest.mark.parametrize("pattern", ["ascending", "descending", "ties"])
def test_topk_selection_with_larger_k(pattern, tmp_path):
    # k = 130 of 1200 selects through the sorted buffer; ascending rows make every element
    # enter it (largest first), constant runs exercise the ties.
    n = 1200
    x = {"ascending": np.arange(n, dtype=np.float32), "descending": -np.arange(n, dtype=np.float32),
         "ties": (np.arange(n) // 100 % 3).astype(np.float32)}[pattern]
    x = np.stack([x, x[::-1], np.roll(x, 77)])
    run_native(topk_text("f32", (3, n), 130, True), [x], tmp_path, "topk")


def test_topk_total_order_edges(tmp_path):
    rng = np.random.default_rng(12)
    x = float_edges((5, 40), rng)
    for k in (7, 40):
        run_native(topk_text("f32", (5, 40), k, True), [x], tmp_path, "topk")


@pytest.mark.parametrize("t", ["f8e4m3fnuz", "f8e5m2fnuz", "f8e5m2", "f4e2m1fn"])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_narrow_floats_every_bit_pattern(t, largest, tmp_path):
    # XLA CPU widens <= 8-bit floats to f32 before keying: the fnuz NaN (0x80) ranks as -NaN,
    # f8e5m2 NaN payloads tie, and f4's -0 ranks below +0.
    dt = dtypes.to_numpy(dtypes.from_name(t))
    count = 1 << dtypes.info(dtypes.from_name(t)).bits
    x = np.random.default_rng(14).permutation(np.tile(np.arange(count, dtype=np.uint8), 2))
    x = x.reshape(2, count).view(dt)
    run_native(topk_text(t, (2, count), count, largest), [x], tmp_path, "topk")


def test_topk_custom_call_with_comparator(tmp_path):
    # XLA CPU's TopK custom-call: the comparator orders (value, index) records.
    body = [f"  ROOT %r = pred[] compare(%a0, %b0), {GT}"]
    text = ("HloModule m\n\n" + comparator(["f32", "s32"], body) +
            "\nENTRY %main (x: f32[4,300]) -> (f32[4,9], s32[4,9]) {\n"
            "  %x = f32[4,300] parameter(0)\n  ROOT %t = (f32[4,9], s32[4,9]) custom-call(%x), "
            "custom_call_target=\"TopK\", called_computations={%cmp}\n}\n")
    x = values("f32", (4, 300), np.random.default_rng(13), distinct=30)
    run_native(text, [x], tmp_path, "topk")


# ---- samples -----------------------------------------------------------------------------------

SORTING_SAMPLES = ["sort", "searchsorted_unique", "top_k", "ops/sort_stable_nan", "ops/top_k_edges"]


def _sorts_top_k(instr) -> bool:
    return instr.opcode in (Opcode.SORT, Opcode.TOPK) or (
        instr.opcode == Opcode.CUSTOM_CALL and instr.attrs.custom_call_target == "TopK")


@pytest.mark.parametrize("name", SORTING_SAMPLES)
@pytest.mark.parametrize("form", ["pb", "opt.pb"])
def test_samples_match_xla_without_host_sorts(name, form, tmp_path):
    require_samples()
    bundle = sample_bundle(SAMPLES / f"{name}.{form}", tmp_path / "m.bundle")
    exe = load_cpu(bundle)
    got, rows = exe.run_profiled(sample_arrays(name, "inputs"))
    by_name = {i.name: i for c in exe.module.computations for i in c.instructions}
    kinds = {r.name: r.kind for r in rows if r.name in by_name and _sorts_top_k(by_name[r.name])}
    assert kinds and set(kinds.values()) == {"kernel"}, kinds
    assert_same_bits(got, sample_arrays(name, "expected"), name)
