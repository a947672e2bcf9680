"""Small convolutions as native kernels: direct loops with the output features innermost.

A convolution thunk's runtime path (hloc/runtime/cpu/contract.py) pays per call: a padded
copy of the input, im2col or per-row GEMM calls from Python, a thread-pool wake-up, or the
reference interpreter for grouped / dilated / reversed forms. For small convolutions that
costs far more than the arithmetic, so they get a kernel here (`@native_kind("convolution")`,
which also lets a run of small thunks around them go into one native driver).

Work units are (output position, block of output features of one group). A unit keeps one
accumulator per feature of its block and sweeps the window taps (skipping taps on padding,
a whole dimension at a time; a base-dilated dimension visits only the taps on input
elements, windows.TapSequence) and the group's input features; the
innermost loop runs over the block's features, unit-stride in the usual HWIO kernel and
NHWC output layouts, so LLVM vectorizes it.

With few output features (at most POSITION_FEATURES, one group: a stencil, a single-channel
filter) that loop would be a scalar one, so units are instead (output row, block of
positions along the output's minor-most spatial dimension): one accumulator per position
and feature, the positions innermost (a tap on padding leaves its position's accumulator
as it is, by a select), in the same order of taps and input features per output element.

XLA semantics: feature groups split input and output features, batch groups split the input
batch and the output features (output feature o belongs to group o / (O / (G * BG)), batch
group major), tap k of a window dimension reads the base-dilated, padded input at
o * stride + k * window_dilation - padding_low, window_reversal flips the kernel taps.
Products accumulate like the dot: f32 for f32 and narrower floats, f64 for f64, 64-bit
integers for integers (wrap-around), or/and for pred.
"""

from __future__ import annotations

import contextlib
import math

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode, Shape
from ...util.record import dataclass
from ..elemental.convert import convert_value
from ..elemental.indexing import delinearize
from ..elemental.memory import major_to_minor, store_element
from ..elemental.reduction import _dot_compute_type as dot_compute_type
from ..elemental.scalar import const, contractible
from ..elemental.types import elem_type
from ..elemental.windows import TapSequence, ceil_div_positive, window_tap
from .kernel import KernelBuild, RootItem, Segment, special_segment
from .kernel_spec import KernelSpec
from .thunk_kernels import native_kind

# Output features accumulated per unit (the innermost, vectorized loop's trip count).
FEATURE_BLOCK = 64
# Convolutions up to this many multiply-adds get a native kernel; larger ones keep the
# runtime's paths (the implicit-GEMM kernel, the GEMM forms), whose per-call costs they
# amortize. Was 1 << 23: a CNN step's transposed-convolution phases (8.4M each) ran here at
# 4 GMAC/s; on the Zen 4 host the CNN step went 14.6 -> 10.6 ms, EfficientNet 26.4 -> 22.3,
# ResNet50 69 -> 63 (medians, alternated).
NATIVE_MAX_MACS = 1 << 21
# Grouped convolutions with at most this many input features per group (depthwise ones: 1)
# get the native kernel whatever their size: as products they are many tiny ones, which the
# runtime can only run as an im2col copy of every window (nine times a 3x3 layer's input)
# and a batched product of depth Cg; MobileNetV2 spent half its time in those copies.
NATIVE_GROUP_FEATURES = 16
# Ungrouped convolutions with at most this many output features vectorize over a block of
# POSITION_BLOCK output positions instead: a 96x96 single-channel 3x3 stencil took 34 us.
POSITION_FEATURES = 4
POSITION_BLOCK = 64


def multiply_adds(instr: Instruction) -> int:
    """Multiply-adds of a convolution: outputs x input features per group x window taps."""
    rhs = instr.operands[1].shape
    cg = rhs.dims[instr.attrs.conv_dnums.kernel_input_feature_dimension]
    taps = math.prod(wd.size for wd in instr.attrs.window.dims) if instr.attrs.window else 1
    return instr.shape.num_elements * cg * taps


@native_kind("convolution")
def wants_native(instr: Instruction) -> bool:
    if instr.opcode != Opcode.CONVOLUTION:
        return False
    if multiply_adds(instr) > NATIVE_MAX_MACS and not _narrow_groups(instr):
        return False
    try:
        _check_types(instr)
    except UnsupportedError:
        return False  # e.g. complex: BLAS runs it
    return True


def _narrow_groups(instr: Instruction) -> bool:
    """A feature-grouped convolution with few input features per group (depthwise)."""
    rhs = instr.operands[1].shape
    cg = rhs.dims[instr.attrs.conv_dnums.kernel_input_feature_dimension]
    return (instr.attrs.feature_group_count or 1) > 1 and cg <= NATIVE_GROUP_FEATURES


def _check_types(instr: Instruction) -> None:
    """UnsupportedError unless the kernel can compute this convolution's element types."""
    ets = [elem_type(s.element_type) for s in (instr.shape, *(o.shape for o in instr.operands))]
    if ets[0].kind != "pred":
        dot_compute_type(ets)


@dataclass(frozen=True)
class ConvGeometry:
    """The sizes a convolution's loops need."""

    groups: int  # feature_group_count
    batch_groups: int
    cg: int  # input features per group (the kernel's input feature dimension)
    og: int  # output features per group
    nb: int  # input batch per batch group
    block: int  # output features per unit
    blocks: int  # units per group along the output features (depthwise: per output position)

    @staticmethod
    def of(instr: Instruction) -> ConvGeometry:
        dn = instr.attrs.conv_dnums
        groups = instr.attrs.feature_group_count or 1
        batch_groups = instr.attrs.batch_group_count or 1
        og = instr.shape.dims[dn.output_feature_dimension] // (groups * batch_groups)
        cg = instr.operands[1].shape.dims[dn.kernel_input_feature_dimension]
        # Depthwise: a unit's block is of neighbouring groups (one feature each) instead.
        if _depthwise(groups, batch_groups, cg, og):
            features, block = groups, _group_block(groups)
        else:
            features, block = og, max(1, min(og, FEATURE_BLOCK))
        return ConvGeometry(groups, batch_groups, cg, og,
                            instr.operands[0].shape.dims[dn.input_batch_dimension] // batch_groups,
                            block, -(-features // block))

    @property
    def depthwise(self) -> bool:
        return _depthwise(self.groups, self.batch_groups, self.cg, self.og)

    @property
    def few_features(self) -> bool:
        """Vectorize over positions (see the module docstring)."""
        return self.groups == 1 and self.batch_groups == 1 and self.og <= POSITION_FEATURES

    @property
    def swept(self) -> int:
        """The features a unit's blocks divide: the groups (depthwise), else a group's output
        features."""
        return self.groups if self.depthwise else self.og

    @property
    def units_per_position(self) -> int:
        return self.blocks if self.depthwise else self.groups * self.batch_groups * self.blocks


def _group_block(groups: int) -> int:
    """Groups per unit of a depthwise convolution: the largest multiple of 16 up to
    FEATURE_BLOCK that divides the group count (the usual channel counts are multiples of 16),
    so that every unit's loop has the same constant trip count, which LLVM turns into straight
    vector code; else FEATURE_BLOCK and a shorter last block."""
    for block in range(FEATURE_BLOCK, 15, -16):
        if groups % block == 0:
            return block
    return min(groups, FEATURE_BLOCK)


def _depthwise(groups: int, batch_groups: int, cg: int, og: int) -> bool:
    """One input and one output feature per group: group g reads input feature g and writes
    output feature g, neighbours in memory in the usual layouts. A unit then sweeps a block of
    groups, a vector loop, where one unit per group (a block of one feature) ran scalar code
    for every output element."""
    return groups > 1 and batch_groups == 1 and cg == 1 and og == 1


@special_segment(Opcode.CONVOLUTION)
def plan_convolution(spec: KernelSpec, item: RootItem):
    instr = item.instr
    _check_types(instr)
    if spec.aliases:
        raise UnsupportedError(f"convolution %{instr.name} writes over an operand")
    return ConvolutionSegment(spec, item)


class ConvolutionSegment(Segment):
    """Units of (output position, feature block); see the module docstring."""

    kind = "convolution"

    def __init__(self, spec: KernelSpec, item: RootItem):
        self.spec, self.item = spec, item
        instr = item.instr
        self.shape: Shape = spec.output_shapes[item.outputs[0]]
        self.geo = ConvGeometry.of(instr)
        dn = instr.attrs.conv_dnums
        # With few features: the window dimension whose output positions a unit blocks.
        self.inner = _position_dimension(instr, self.shape) if self.geo.few_features else None
        skip = {dn.output_feature_dimension}
        if self.inner is not None:
            skip.add(dn.output_spatial_dimensions[self.inner])
            positions = self.shape.dims[dn.output_spatial_dimensions[self.inner]]
            self.units_per_row = -(-positions // POSITION_BLOCK)
        else:
            self.units_per_row = self.geo.units_per_position
        self.rows = [d for d in major_to_minor(self.shape) if d not in skip]
        n_rows = math.prod(self.shape.dims[d] for d in self.rows)
        empty = self.shape.num_elements == 0
        self.extent = 0 if empty else n_rows * self.units_per_row

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        ctx = kb.ctx
        b = ctx.builder
        emitter = _ConvEmitter(kb, self.item.instr, self.geo, self.inner)
        per_row = self.units_per_row
        with ctx.loop(lo, hi, "unit") as unit:
            row, fb = b.udiv(unit, ctx.i64(per_row)), b.urem(unit, ctx.i64(per_row))
            index: list[ir.Value] = [ctx.i64(0)] * self.shape.rank
            dims = [self.shape.dims[d] for d in self.rows]
            for d, v in zip(self.rows, delinearize(b, row, dims, fold_unit_dims=False), strict=True):
                index[d] = v
            out = kb.outputs[self.item.outputs[0]]
            if self.inner is None:
                emitter.unit(index, fb, out, self.shape)
            else:
                emitter.position_unit(index, fb, out, self.shape)


def _position_dimension(instr: Instruction, shape: Shape) -> int | None:
    """The window dimension along whose output positions a few-feature convolution
    vectorizes: the output's minor-most spatial dimension of at least 8 positions, not
    base-dilated (its taps are found per position). With more than one output feature only
    where the positions read the input at unit stride (stride 1 along the input's minor-most
    dimension): gathers there made a 3-channel NHWC layer 2-4x slower than feature vectors.
    None: keep feature blocks."""
    dn = instr.attrs.conv_dnums
    window = instr.attrs.window.dims if instr.attrs.window else ()
    order = major_to_minor(shape)
    spatial = sorted(range(len(dn.output_spatial_dimensions)),
                     key=lambda i: order.index(dn.output_spatial_dimensions[i]))
    inner = next((i for i in reversed(spatial)
                  if shape.dims[dn.output_spatial_dimensions[i]] >= 8), None)
    if inner is None or window[inner].base_dilation > 1:
        return None
    og = shape.dims[dn.output_feature_dimension]
    lhs = instr.operands[0].shape
    minor = [d for d in major_to_minor(lhs) if lhs.dims[d] > 1]
    unit_stride = window[inner].stride == 1 and minor[-1:] == [dn.input_spatial_dimensions[inner]]
    return inner if og == 1 or unit_stride else None


class _ConvEmitter:
    """The loops of one unit."""

    def __init__(self, kb: KernelBuild, instr: Instruction, geo: ConvGeometry,
                 inner: int | None = None):
        self.ctx, self.instr, self.geo, self.inner = kb.ctx, instr, geo, inner
        self.dn = instr.attrs.conv_dnums
        self.window = instr.attrs.window.dims if instr.attrs.window else ()
        self.lhs_gen, self.rhs_gen = (kb.gen(o) for o in instr.operands)
        self.lhs, self.rhs = (o.shape for o in instr.operands)
        self.l_et, self.r_et = (elem_type(s.element_type) for s in (self.lhs, self.rhs))
        self.out_et = elem_type(instr.shape.element_type)
        self.pred = self.out_et.kind == "pred"
        self.cet = self.out_et if self.pred else dot_compute_type(
            [self.l_et, self.r_et, self.out_et])
        slots = geo.block if inner is None else geo.og * POSITION_BLOCK
        self.acc = self.ctx.alloca(self.cet.value_type, slots, name="acc")

    def unit(self, index: list[ir.Value], fb: ir.Value, out: ir.Value, shape: Shape) -> None:
        ctx, b, geo, dn = self.ctx, self.ctx.builder, self.geo, self.dn
        # Depthwise: fb is the block of groups; its output and input features start at o0.
        features = geo.swept
        q, jb = ((ctx.i64(0), fb) if geo.depthwise else
                 (b.udiv(fb, ctx.i64(geo.blocks)), b.urem(fb, ctx.i64(geo.blocks))))
        o0 = b.add(b.mul(q, ctx.i64(geo.og)), b.mul(jb, ctx.i64(geo.block)))
        width = ctx.i64(geo.block) if features % geo.block == 0 else ctx.call(
            "llvm.smin.i64", [ctx.i64(geo.block), b.sub(ctx.i64(features),
                                                        b.mul(jb, ctx.i64(geo.block)))])
        bg, g = b.udiv(q, ctx.i64(geo.groups)), b.urem(q, ctx.i64(geo.groups))
        li: list[ir.Value] = [ctx.i64(0)] * self.lhs.rank
        li[dn.input_batch_dimension] = b.add(b.mul(bg, ctx.i64(geo.nb)),
                                             index[dn.output_batch_dimension])
        c0 = o0 if geo.depthwise else b.mul(g, ctx.i64(geo.cg))
        with ctx.loop(0, width, "zero") as j:
            b.store(const(self.cet, 0), self._slot(j))
        self._taps(index, li, c0, o0, width)
        with ctx.loop(0, width, "store") as j:
            acc = b.load(self._slot(j), typ=self.cet.value_type)
            index[dn.output_feature_dimension] = b.add(o0, j)
            value = acc if self.pred else convert_value(ctx, self.cet, self.out_et, acc)
            store_element(ctx, shape, out, list(index), value)

    def position_unit(self, index: list[ir.Value], pb: ir.Value, out: ir.Value,
                      shape: Shape) -> None:
        """Block `pb` of POSITION_BLOCK output positions along window dimension `inner`,
        every output feature (few features: see the module docstring)."""
        ctx, b, geo, dn = self.ctx, self.ctx.builder, self.geo, self.dn
        out_dim = dn.output_spatial_dimensions[self.inner]
        p0 = b.mul(pb, ctx.i64(POSITION_BLOCK))
        width = ctx.call("llvm.smin.i64", [ctx.i64(POSITION_BLOCK),
                                           b.sub(ctx.i64(shape.dims[out_dim]), p0)])
        with ctx.loop(0, geo.og * POSITION_BLOCK, "zero") as j:
            b.store(const(self.cet, 0), self._slot(j))
        li: list[ir.Value] = [ctx.i64(0)] * self.lhs.rank
        li[dn.input_batch_dimension] = index[dn.output_batch_dimension]
        self._taps(index, li, ctx.i64(0), ctx.i64(0), ctx.i64(geo.og), positions=(p0, width))
        # Stored along the output's layout: features innermost where they are minor (NHWC).
        order = major_to_minor(shape)
        features_minor = order.index(dn.output_feature_dimension) > order.index(out_dim)
        loops = [(geo.og, "store.o"), (width, "store.p")]
        with contextlib.ExitStack() as stack:
            first, second = (stack.enter_context(ctx.loop(0, n, name))
                             for n, name in (loops[::-1] if features_minor else loops))
            o, j = (second, first) if features_minor else (first, second)
            slot = self._slot(b.add(b.mul(o, ctx.i64(POSITION_BLOCK)), j))
            acc = b.load(slot, typ=self.cet.value_type)
            index[dn.output_feature_dimension] = o
            index[out_dim] = b.add(p0, j)
            value = acc if self.pred else convert_value(ctx, self.cet, self.out_et, acc)
            store_element(ctx, shape, out, list(index), value)

    def _slot(self, j: ir.Value) -> ir.Value:
        return self.ctx.builder.gep(self.acc, [j], inbounds=True,
                                    source_etype=self.cet.value_type)

    def _taps(self, index, li, c0, o0, width, positions=None) -> None:
        """Every valid tap: a dimension's taps on padding are skipped before the inner ones.
        With `positions` (p0, count), the taps of window dimension `inner` are instead
        applied innermost to the positions p0 + j (j < count) they do not put on padding:
        accumulator o * POSITION_BLOCK + j for feature o."""
        ctx, b, dn = self.ctx, self.ctx.builder, self.dn
        ri: list[ir.Value] = [ctx.i64(0)] * self.rhs.rank
        inner_tap = None
        with contextlib.ExitStack() as stack:
            for i, wd in enumerate(self.window):
                out_pos, size = (index[dn.output_spatial_dimensions[i]],
                                 self.lhs.dims[dn.input_spatial_dimensions[i]])
                if positions is not None and i == self.inner:
                    tap = inner_tap = stack.enter_context(ctx.loop(0, wd.size, "tap"))
                    pos = ctx.i64(0)  # per position: _position_taps
                elif wd.base_dilation > 1:  # only the taps on input elements, none to skip
                    seq = TapSequence.of(ctx, out_pos, wd, size)
                    t = stack.enter_context(ctx.loop(seq.start, seq.stop, "tap"))
                    tap, pos = seq.tap(ctx, t)
                else:
                    tap = stack.enter_context(ctx.loop(0, wd.size, "tap",
                                                       unroll=False if self.geo.depthwise else None))
                    ok, pos = window_tap(ctx, out_pos, tap, wd, size)
                    stack.enter_context(b.if_then(ok))
                li[dn.input_spatial_dimensions[i]] = pos
                ri[dn.kernel_spatial_dimensions[i]] = (
                    b.sub(ctx.i64(wd.size - 1), tap) if wd.window_reversal else tap)
            c = stack.enter_context(ctx.loop(0, self.geo.cg, "c"))
            ri[dn.kernel_input_feature_dimension] = c
            if positions is not None:
                self._position_taps(li, ri, c, inner_tap, positions)
                return
            if self.geo.depthwise:  # feature o0 + j of the output reads input feature o0 + j
                j = stack.enter_context(ctx.loop(0, width, "j"))
                li[dn.input_feature_dimension] = b.add(c0, j)
                x = self._convert(self.l_et, self.lhs_gen(list(li)))
            else:
                li[dn.input_feature_dimension] = b.add(c0, c)
                x = self._convert(self.l_et, self.lhs_gen(list(li)))
                j = stack.enter_context(ctx.loop(0, width, "j"))
            ri[dn.kernel_output_feature_dimension] = b.add(o0, j)
            y = self._convert(self.r_et, self.rhs_gen(list(ri)))
            slot = self._slot(j)
            acc = b.load(slot, typ=self.cet.value_type)
            b.store(self._combine(acc, x, y), slot)

    def _position_taps(self, li, ri, c, tap, positions) -> None:
        """Input feature `c`, tap `tap` of window dimension `inner`: every feature's product
        into every position's accumulator, the positions innermost."""
        ctx, b, dn = self.ctx, self.ctx.builder, self.dn
        p0, count = positions
        wd = self.window[self.inner]
        in_dim = dn.input_spatial_dimensions[self.inner]
        li[dn.input_feature_dimension] = c
        with ctx.loop(0, self.geo.og, "o") as o:
            ri[dn.kernel_output_feature_dimension] = o
            y = self._convert(self.r_et, self.rhs_gen(list(ri)))
            base = b.mul(o, ctx.i64(POSITION_BLOCK))
            # The positions whose tap lands on the input: o*stride + tap*dil - pad_low in
            # [0, size) for o = p0 + j; the others are skipped (padding adds nothing).
            shift = b.sub(ctx.i64(wd.padding_low), b.mul(tap, ctx.i64(wd.window_dilation)))
            # (Clamping either bound at 0 first changes no j range: j >= 0 and p0 >= 0.)
            first = ceil_div_positive(ctx, shift, wd.stride)
            stop = ceil_div_positive(ctx, b.add(shift, ctx.i64(self.lhs.dims[in_dim])), wd.stride)
            j_lo = ctx.call("llvm.smax.i64", [ctx.i64(0), b.sub(first, p0)])
            j_hi = ctx.call("llvm.smin.i64", [count, b.sub(stop, p0)])
            with ctx.loop(j_lo, j_hi, "p") as j:
                li[in_dim] = b.sub(b.mul(b.add(p0, j), ctx.i64(wd.stride)), shift)
                x = self._convert(self.l_et, self.lhs_gen(list(li)))
                slot = self._slot(b.add(base, j))
                acc = b.load(slot, typ=self.cet.value_type)
                b.store(self._combine(acc, x, y), slot)

    def _convert(self, et, value):
        return convert_value(self.ctx, et, self.cet, value)

    def _combine(self, acc, x, y):
        b = self.ctx.builder
        if self.pred:
            return b.or_(acc, b.and_(x, y))
        if self.cet.is_float:
            return contractible(self.ctx, b.fadd(acc, contractible(self.ctx, b.fmul(x, y))))
        return b.add(acc, b.mul(x, y))
