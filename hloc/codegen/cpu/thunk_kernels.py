"""Kernel thunks → the kernels to emit: one per plain thunk, several per outlined fusion.

A `KernelGroup` is what one Kernel thunk needs: a single kernel (its fused computation or
single op, small dots included: dot.py), or — for fusions around other dots/convolutions —
the prologue/epilogue kernels of its `Composite` (outline.py). A group is emitted all or
nothing: if any of its kernels is unsupported the thunk runs on the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from ...buffers.assignment import ScratchNeed, Slice
from ...errors import UnsupportedError
from ...ir import Instruction, Module, Opcode
from ...ir.computation import dfs_post_order
from ...ir.opcodes import ELEMENTWISE, INDEX_REMAPPING, TRANSCENDENTAL
from ...registry import Registry
from ...thunks.base import walk
from ...thunks.thunks import While
from ...util.record import dataclass
from .dot import SMALL_DOT_WORK, buffered, dot_work, inline_dot, kernel_gemm
from .kernel_spec import KernelInfo, KernelSpec, kernel_symbol
from .loops import element_work
from .outline import CONTRACTIONS, Composite, outline

SCRATCH_ALIGN = 64


@dataclass
class KernelGroup:
    """The kernels of one Kernel thunk (or of an optional native thunk, see NATIVE_KINDS)."""

    thunk: str
    opcode: str
    specs: list[KernelSpec]
    composite: Composite | None = None
    optional: bool = False  # not a Kernel thunk: without a kernel its own runtime path runs
    # Calls per execution of the module: the product of the trip counts of the while loops
    # around it (UNKNOWN_TRIPS for a loop whose count the compiler does not know).
    calls: int = 1


UNKNOWN_TRIPS = 8


# Thunk kinds other than Kernel that may get a native kernel as well (sort, small gemms, ...):
# kind -> (fn(instruction) -> bool, lowest -O level), registered by the modules that emit
# them (listed here; "gemm" below). A thunk whose kernel cannot be emitted keeps its kind's
# runtime implementation (it is no host fallback).
NATIVE_KINDS: Registry[str, tuple[Callable[[Instruction], bool], int]] = Registry(
    "native thunk kernel", modules=tuple(
        f"hloc.codegen.cpu.{name}" for name in ("conv", "custom_calls", "fft", "sort")))


def native_kind(kind: str, min_opt_level: int = 0):
    """Register `fn(instruction) -> bool`: whether a thunk of `kind` should try a kernel
    (from -O`min_opt_level` on: below it the kind's runtime path is always used)."""
    def register(fn):
        NATIVE_KINDS.add(kind, (fn, min_opt_level))
        return fn
    return register


def wants_kernel(kind: str, instr: Instruction | None, opt_level: int) -> bool:
    """Whether a thunk of `kind` (other than "kernel") should try a native kernel."""
    entry = NATIVE_KINDS.get(kind)
    if entry is None or instr is None:
        return False
    fn, min_level = entry
    return opt_level >= min_level and fn(instr)


# A small dot as a kernel (dot.py) instead of a BLAS call from Python: a loop around it can
# then run in a native driver. So is a dot of types BLAS does not take, at any size.
native_kind("gemm")(kernel_gemm)


def kernel_groups(module: Module, program, opt_level: int = 2
                  ) -> tuple[list[KernelGroup], dict[str, dict]]:
    """The kernel group of every Kernel thunk (and of the other thunks NATIVE_KINDS selects at
    `opt_level`), and the Kernel thunks that cannot have one."""
    instructions = {i.name: i for c in module.computations for i in c.instructions}
    groups: list[KernelGroup] = []
    fallbacks: dict[str, dict] = {}
    calls: dict[int, int] = {}  # id of a thunk -> its calls per execution (if not 1)
    for visit in walk(program.sequence):
        thunk, parent = visit.thunk, visit.parent
        if parent is not None:
            trips = (parent.trip_count or UNKNOWN_TRIPS) if isinstance(parent, While) else 1
            calls[id(thunk)] = calls.get(id(parent), 1) * trips
        instr = instructions[thunk.name] if thunk.name in instructions else None
        optional = thunk.kind != "kernel"
        if optional and not wants_kernel(thunk.kind, instr, opt_level):
            continue
        try:
            groups.append(replace(_group(instr, thunk, optional), calls=calls.get(id(thunk), 1)))
        except UnsupportedError as e:
            if not optional:
                fallbacks[thunk.name] = {"opcode": instr.opcode.value, "reason": str(e)}
    return groups, fallbacks


def _group(instr: Instruction, thunk, optional: bool = False) -> KernelGroup:
    if any(not o.shape.is_array for o in instr.operands):
        raise UnsupportedError(f"%{instr.name} has a tuple-shaped operand")
    symbol = kernel_symbol(thunk.name)
    composite = None if optional else outlined(instr, thunk.name, symbol,
                                               _output_alone(thunk.reads(), thunk.writes()))
    if composite is not None:
        return KernelGroup(thunk.name, instr.opcode.value, _composite_specs(composite, thunk),
                           composite)
    operands, outputs = thunk.reads(), thunk.writes()
    aliases = slice_aliases(operands, outputs)
    spec = KernelSpec.for_instruction(instr, symbol, aliases)
    if len(spec.operand_shapes) != len(operands) or len(spec.output_shapes) != len(outputs):
        raise UnsupportedError(f"%{instr.name}: operand/output leaves do not match its slices")
    return KernelGroup(thunk.name, instr.opcode.value, [spec], optional=optional)


def outlined(instr: Instruction, thunk: str, symbol: str, into_output: bool
             ) -> Composite | None:
    """The composite a Kernel thunk `thunk` of `instr` becomes, or None (one kernel);
    `into_output`: outline.outline's."""
    return outline(instr, thunk, symbol, into_output) if _outlines(instr) else None


def _outlines(instr: Instruction) -> bool:
    """Whether the Kernel thunk of `instr` may become a composite (outline decides)."""
    return (instr.opcode == Opcode.FUSION and not _dots_inline(instr)
            and all(o.shape.is_array for o in instr.operands))


def _output_alone(operands: tuple[Slice, ...], outputs: tuple[Slice, ...]) -> bool:
    """Whether no output slice overlaps an operand slice."""
    return not any(o.allocation == i.allocation and o.offset < i.offset + i.size
                   and i.offset < o.offset + o.size for o in outputs for i in operands)


def thunk_scratch(instr: Instruction) -> ScratchNeed:
    """The scratch the Kernel thunk of `instr` needs while it runs (buffer assignment places
    it: plan.py): its composite's intermediate buffers, with the output alone or not."""
    if not _outlines(instr):
        return ScratchNeed(0, 0)
    return ScratchNeed(*(0 if (c := outline(instr, instr.name, "", alone, kernels=False)) is None
                         else scratch_bytes(c) for alone in (True, False)))


def _dots_inline(fusion: Instruction) -> bool:
    """Whether a fusion's contractions are all small dots that its own kernel computes
    (dot.py): cheaper than a library call plus prologue and epilogue kernels, as long as the
    kernel stays on one thread (each part of a split kernel would compute them again)."""
    comp = fusion.fused_computation()
    contractions = [i for i in comp.post_order() if i.opcode in CONTRACTIONS]
    if not contractions or not all(inline_dot(c) for c in contractions):
        return False
    return work(KernelSpec.for_instruction(fusion)) < SMALL_DOT_WORK


def _composite_specs(composite: Composite, thunk) -> list[KernelSpec]:
    """The composite's kernels with aliases from the slices their buffers resolve to."""
    kernel_steps = [s for s in composite.steps if s["kind"] == "kernel"]
    specs = []
    for spec, step in zip(composite.specs, kernel_steps, strict=True):
        slices = [resolve(ref, thunk, scratch_slices(composite, -1)) for ref in step["buffers"]]
        n = len(spec.operand_shapes)
        specs.append(replace(spec, aliases=slice_aliases(slices[:n], slices[n:])))
    return specs


def scratch_slices(composite: Composite, allocation: int, base: int = 0) -> list[Slice]:
    """Each scratch buffer's slice of a scratch allocation, 64-byte aligned from `base`."""
    out, offset = [], base
    for shape in composite.scratch:
        out.append(Slice(allocation, offset, shape.byte_size))
        offset += -(-max(shape.byte_size, 1) // SCRATCH_ALIGN) * SCRATCH_ALIGN
    return out


def scratch_bytes(composite: Composite) -> int:
    slices = scratch_slices(composite, 0)
    return slices[-1].offset + slices[-1].size if slices else 0


def resolve(ref, thunk, scratch: list[Slice]) -> Slice:
    """The slice a buffer reference names."""
    kind, index = ref
    if kind == "operand":
        return thunk.operands[index]
    if kind == "output":
        return thunk.outputs[index]
    return scratch[index]


def slice_aliases(operands, outputs) -> tuple[tuple[int, int], ...]:
    """(output, operand) pairs whose slices are the same bytes (in-place updates and operand
    reuse). A partial overlap has no kernel form: UnsupportedError (the host runs it)."""
    pairs = []
    for k, out in enumerate(outputs):
        for i, op in enumerate(operands):
            if op == out:
                pairs.append((k, i))
            elif _overlap(op, out):
                raise UnsupportedError(f"output {k} partially overlaps operand {i}")
    return tuple(pairs)


def _overlap(a, b) -> bool:
    return a.allocation == b.allocation and a.offset < b.offset + b.size and \
        b.offset < a.offset + a.size and a.size > 0 and b.size > 0


# ---- metadata ---------------------------------------------------------------------------------

# Opcodes whose kernels compute each output element straight from operand elements, with no
# loop of their own inside the kernel's loop over the output (see loop_free).
_LOOP_FREE = (ELEMENTWISE - {Opcode.MAP, Opcode.POWER}) | (INDEX_REMAPPING - {Opcode.GATHER}) | {
    Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT,
    Opcode.DYNAMIC_UPDATE_SLICE}


def loop_free(spec: KernelSpec) -> bool:
    """Whether `spec` is a plain map over its outputs: elementwise arithmetic and index
    remapping only (no reduction, window, contraction, sort, gather or nested computation),
    so its kernel has no loop beyond the loop over output elements. Small such kernels need
    none of LLVM's loop optimizations (llvm.SMALL_KERNEL_PASSES)."""
    return all(i.opcode in _LOOP_FREE for i in spec.computation.post_order())


# Opcodes whose kernels sweep a window per output element (a convolution's taps and input
# channels, a pooling window): loops LLVM's unrolling makes 2-3x faster even in kernels of a
# few microseconds (cnn, conv_variants, grads), so such kernels are never compact.
_WINDOWED = frozenset({Opcode.CONVOLUTION, Opcode.REDUCE_WINDOW, Opcode.SELECT_AND_SCATTER})


def windowed(spec: KernelSpec) -> bool:
    """Whether `spec` computes a convolution or a windowed reduction (see _WINDOWED)."""
    return any(i.opcode in _WINDOWED for i in spec.computation.post_order())


def work(spec: KernelSpec) -> int:
    """Rough scalar operations of the whole kernel (the runtime's parallel-split estimate)."""
    root = spec.computation.root
    items = root.operands if root.opcode == Opcode.TUPLE else [root]
    total = sum(_item_work(spec, item) for item in items)
    # Dots computed ahead into a buffer run once per call, whatever reads them.
    return total + sum(dot_work(i) for i in spec.computation.post_order() if buffered(i))


# An element of a kernel that applies a float TRANSCENDENTAL op (a libm call or a polynomial
# and its range reduction) costs about as much as TRANSCENDENTAL_WORK plain ones. Sinkhorn's logsumexp over a 256 x 256 matrix (65536 exps) took 47 us on one thread,
# a multiply-subtract over the same matrix 5.5 us: counted as 65536 operations, it stayed
# below the runtime's parallel split (2^18) and ran on one core.
TRANSCENDENTAL_WORK = 4


def _math_weight(item: Instruction) -> int:
    """TRANSCENDENTAL_WORK where `item` computes a float transcendental op, else 1."""
    below = dfs_post_order([item], lambda i: i.operands)
    return TRANSCENDENTAL_WORK if any(i.opcode in TRANSCENDENTAL and i.shape.is_array
                                      and i.shape.dtype.is_float for i in below) else 1


def _item_work(spec: KernelSpec, item: Instruction) -> int:
    if item.opcode == Opcode.DOT:
        return dot_work(item)
    if item.opcode == Opcode.REDUCE:
        return math.prod(item.operands[0].shape.dims) * _math_weight(item)
    if item.opcode == Opcode.DYNAMIC_UPDATE_SLICE and spec.aliases:
        return math.prod(item.operands[1].shape.dims)  # in place: only the update is written
    if item.opcode == Opcode.SORT:
        # n log n comparisons per row, each moving every operand's element.
        dims = item.operands[0].shape.dims
        n = dims[item.dimensions[0]]
        return math.prod(dims) * max(1, n.bit_length()) * len(item.operands)
    if item.opcode == Opcode.FFT:
        # Every pass term of every batch element (fft.py): the transform's size, not only
        # its output elements, decides the thread split.
        from ..elemental.dft import plan_of  # FFT modules only (~5 ms to import)

        plan = plan_of(item)
        return 0 if plan.empty else plan.batches * plan.pass_work()
    if item.opcode == Opcode.SCATTER:
        # Every update element is combined into the output (besides the operand's copy): a
        # k-means step's segment sum of 4000 x 16 updates into 8 x 16 counted as 128
        # elements, a small kernel, so scalar code (37 us a call).
        n = (len(item.operands) - 1) // 2
        updates = math.prod(item.operands[n + 1].shape.dims) * n
        return updates + sum(math.prod(s.dims) for _, s in item.shape.leaves())
    if item.opcode == Opcode.TOPK:
        from .topk import topk_work

        return topk_work(item)
    if item.opcode == Opcode.CUSTOM_CALL:
        from .custom_calls import custom_call_work

        return custom_call_work(item)
    elements = sum(math.prod(s.dims) for _, s in item.shape.leaves())
    return elements * element_work(item) * _math_weight(item)


def kernel_json(info: KernelInfo, spec: KernelSpec) -> dict:
    entry = info.to_json()
    entry["symbol"] = entry.pop("name")
    entry["aliases"] = [list(a) for a in spec.aliases]
    entry["work"] = work(spec)
    return entry


def composite_json(group: KernelGroup, infos: dict[str, KernelInfo]) -> dict:
    composite = group.composite
    specs = {s.name: s for s in group.specs}
    steps = []
    for step in composite.steps:
        entry = dict(step)
        if step["kind"] == "kernel":
            entry.update(kernel_json(infos[step["symbol"]], specs[step["symbol"]]))
        steps.append(entry)
    return {"scratch": [[s.offset, s.size] for s in scratch_slices(composite, 0)],
            "scratch_bytes": scratch_bytes(composite), "steps": steps}
