"""Native small FFTs: direct DFT sums (elemental/dft.py), one work unit per batch element.

A unit applies the plan's 1-D passes one after another: the first reads the operand, the
last writes the result, the ones between go through two row-major f64 scratch blocks on the
stack (so every term is summed in f64, and a multi-dimensional transform costs the sum of
its axes' lengths per point instead of their product). Fft thunks get this kernel at -O3, through
thunk_kernels.NATIVE_KINDS, when their transforms are small (`native_fft`); bigger ones keep
the thunk's numpy path, which wins there (O(n log n) against these O(n^2) sums).

Only from -O3: at the default -O2 an FFT is a library call (numpy's pocketfft), as in XLA,
which compiles nothing for it. The kernels run small transforms about 5x faster (samples/fft:
0.012 ms against 0.068 ms), but each costs LLVM about 12 ms, several times XLA's whole compile
of such a module.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode
from ..elemental.indexing import delinearize
from ..elemental.memory import store_element
from ..elemental.types import F64
from .kernel import KernelBuild, RootItem, Segment, special_segment
from .kernel_spec import KernelSpec
from .sort import STACK_BYTES
from .thunk_kernels import native_kind

if TYPE_CHECKING:
    from ..elemental.dft import AxisPass, DftPlan, Parts

# elemental/dft.py is imported where an FFT is planned or emitted, not with this module (the
# kernel registries import it for every compile, and a compile with no FFT saves ~5 ms).

# Native while a batch element's passes sum at most MAX_UNIT_TERMS terms and the whole
# transform at most MAX_TERMS_PER_AXIS per transformed axis (numpy's fftn pays its call
# overhead once per axis). Measured on 1-3-D c64 transforms against the numpy path: these
# sums cost about 0.6-1 ns a term, numpy about 10 us a call plus its O(n log n) work; the
# bounds keep the native kernel the faster one (e.g. 16 x FFT{32}: 12 us vs 14 us;
# 16 x FFT{64}, 65536 terms, goes to numpy: 41 us vs 15 us).
MAX_UNIT_TERMS = 1 << 12
MAX_TERMS_PER_AXIS = 1 << 14


@native_kind("fft", min_opt_level=3)
def native_fft(instr: Instruction) -> bool:
    """Whether an fft thunk should get a native kernel."""
    from ..elemental.dft import plan_of

    if instr.opcode != Opcode.FFT:
        return False
    try:
        plan = plan_of(instr)
    except UnsupportedError:
        return False
    unit = plan.pass_work()
    return unit <= MAX_UNIT_TERMS and unit * plan.batches <= MAX_TERMS_PER_AXIS * plan.rank \
        and _scratch_bytes(plan) <= STACK_BYTES


def _scratch_bytes(plan: DftPlan) -> int:
    blocks = min(2, len(plan.passes) - 1)
    return blocks * math.prod(plan.row_dims) * 16


@special_segment(Opcode.FFT)
def plan_fft(spec: KernelSpec, item: RootItem):
    return FftSegment(spec, item)


class FftSegment(Segment):
    """Every batch element's transform, one unit each."""

    kind = "fft"

    def __init__(self, spec: KernelSpec, item: RootItem):
        from ..elemental.dft import plan_of

        if spec.aliases:
            raise UnsupportedError(f"%{item.instr.name}: fft result shares its operand's buffer")
        self.spec, self.item = spec, item
        self.plan = plan_of(item.instr)
        if _scratch_bytes(self.plan) > STACK_BYTES:
            raise UnsupportedError(f"%{item.instr.name}: {self.plan.describe()} needs more "
                                   "scratch than the stack holds")
        self.extent = 0 if self.plan.empty else self.plan.batches

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        from ..elemental.dft import finish, to_parts

        ctx, plan = kb.ctx, self.plan
        read = kb.gen(self.item.instr.operands[0])
        blocks = [ctx.alloca(F64, 2 * math.prod(plan.row_dims))
                  for _ in range(min(2, len(plan.passes) - 1))]
        out = self.item.outputs[0]
        out_shape, out_ptr = self.spec.output_shapes[out], kb.outputs[out]
        with ctx.loop(lo, hi, "fft.batch") as unit:
            batch = delinearize(ctx.builder, unit, list(plan.batch), fold_unit_dims=False)

            def load_operand(idx: list[ir.Value]) -> Parts:
                return to_parts(ctx, read(batch + idx))

            def store_result(idx: list[ir.Value], re, im) -> None:
                store_element(ctx, out_shape, out_ptr, batch + idx, finish(ctx, plan, re, im))

            load = load_operand
            extents = list(plan.in_dims)
            for i, p in enumerate(plan.passes):
                last = i == len(plan.passes) - 1
                block = None if last else _Block(ctx, blocks[i % 2], plan.row_dims)
                _emit_pass(ctx, p, extents, load, store_result if last else block.store)
                extents[p.axis] = p.n_out
                load = block.load if block is not None else load


def _emit_pass(ctx, p: AxisPass, extents: list[int], load, store) -> None:
    """Pass `p` over every line along its axis (the other axes at their current extents)."""
    from ..elemental.dft import line_sum

    others = [a for a in range(len(extents)) if a != p.axis]

    def lines(depth: int, idx: list[ir.Value]) -> None:
        if depth < len(others):
            a = others[depth]
            with ctx.loop(0, extents[a], f"fft.o{a}") as i:
                lines(depth + 1, idx[:a] + [i] + idx[a + 1:])
            return
        with ctx.loop(0, p.n_out, "fft.k") as k:
            re, im = line_sum(ctx, p, k, lambda x: load(idx[:p.axis] + [x] + idx[p.axis + 1:]))
            store(idx[:p.axis] + [k] + idx[p.axis + 1:], re, im)

    lines(0, [ctx.i64(0)] * len(extents))


class _Block:
    """A row-major scratch block of f64 complex values (re, im interleaved)."""

    def __init__(self, ctx, ptr: ir.Value, dims: tuple[int, ...]):
        self.ctx, self.ptr = ctx, ptr
        self.strides = [2 * math.prod(dims[a + 1:]) for a in range(len(dims))]

    def _pointers(self, idx: list[ir.Value]) -> list[ir.Value]:
        b, ctx = self.ctx.builder, self.ctx
        offset = ctx.i64(0)
        for v, stride in zip(idx, self.strides, strict=True):
            offset = b.add(offset, b.mul(v, ctx.i64(stride), flags=["nsw"]), flags=["nsw"])
        return [b.gep(self.ptr, [offset if k == 0 else b.add(offset, ctx.i64(1))],
                      inbounds=True, source_etype=F64) for k in range(2)]

    def load(self, idx: list[ir.Value]) -> Parts:
        re, im = (self.ctx.builder.load(p, typ=F64) for p in self._pointers(idx))
        return re, im

    def store(self, idx: list[ir.Value], re, im) -> None:
        im = im if im is not None else ir.Constant(F64, 0.0)
        for ptr, v in zip(self._pointers(idx), (re, im), strict=True):
            self.ctx.builder.store(v, ptr)
