"""Direct convolution as an elemental lowering for the CUDA target.

Each output element sums input x kernel over the kernel's input features and window taps,
so a convolution (alone or fused) runs in the loop kernel, one thread per output element.
XLA semantics: feature groups split input and output features, batch groups split the input
batch and the output features (group = output feature / (O / (G * BG)), batch-group major),
a window tap k reads the base-dilated, padded input at o * stride + k * window_dilation -
padding_low (skipped unless it hits a real element), window_reversal flips the taps.
Products accumulate in f32 (f64 for f64, 64-bit integers for integers), like the dot.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode
from ..elemental.convert import convert_value
from ..elemental.reduction import accumulate_loops
from ..elemental.registry import emits
from ..elemental.scalar import const
from ..elemental.types import I1, elem_type
from ..elemental.windows import window_tap
from .gemm import compute_type


@emits(Opcode.CONVOLUTION, target="cuda")
def convolution(ctx, instr: Instruction, gens):
    lhs_gen, rhs_gen = gens
    dn = instr.attrs.conv_dnums
    window = instr.attrs.window.dims
    lhs, rhs = instr.operands[0].shape, instr.operands[1].shape
    out_et = elem_type(instr.shape.element_type)
    if out_et.kind == "pred":
        raise UnsupportedError(f"pred convolution %{instr.name}")
    cet = compute_type(instr)
    l_et, r_et = elem_type(lhs.element_type), elem_type(rhs.element_type)
    groups = instr.attrs.feature_group_count or 1
    batch_groups = instr.attrs.batch_group_count or 1
    cg = rhs.dims[dn.kernel_input_feature_dimension]
    og = instr.shape.dims[dn.output_feature_dimension] // (groups * batch_groups)
    nb = lhs.dims[dn.input_batch_dimension] // batch_groups
    b = ctx.builder

    def generate(index):
        o = index[dn.output_feature_dimension]
        q = b.udiv(o, ctx.i64(max(1, og)))
        bg, g = b.udiv(q, ctx.i64(groups)), b.urem(q, ctx.i64(groups))
        in_batch = b.add(b.mul(bg, ctx.i64(nb)), index[dn.output_batch_dimension])

        def body(ivs, accs):
            c, taps = ivs[0], ivs[1:]
            li = [ctx.i64(0)] * lhs.rank
            ri = [ctx.i64(0)] * rhs.rank
            li[dn.input_batch_dimension] = in_batch
            li[dn.input_feature_dimension] = b.add(b.mul(g, ctx.i64(cg)), c)
            ri[dn.kernel_output_feature_dimension] = o
            ri[dn.kernel_input_feature_dimension] = c
            valid = ir.Constant(I1, 1)
            for i, (wd, tap) in enumerate(zip(window, taps, strict=True)):
                ok, pos = window_tap(ctx, index[dn.output_spatial_dimensions[i]], tap, wd,
                               lhs.dims[dn.input_spatial_dimensions[i]])
                valid = b.and_(valid, ok)
                li[dn.input_spatial_dimensions[i]] = pos
                ri[dn.kernel_spatial_dimensions[i]] = (
                    b.sub(ctx.i64(wd.size - 1), tap) if wd.window_reversal else tap)

            def product():
                x = convert_value(ctx, l_et, cet, lhs_gen(li))
                y = convert_value(ctx, r_et, cet, rhs_gen(ri))
                return b.fadd(accs[0], b.fmul(x, y)) if cet.is_float else \
                    b.add(accs[0], b.mul(x, y))

            return [ctx.select_branch(valid, product, lambda: accs[0])]

        bounds = [(ctx.i64(0), ctx.i64(cg))] + [(ctx.i64(0), ctx.i64(wd.size)) for wd in window]
        if math.prod(hi.constant for _, hi in bounds) == 0:
            acc = const(cet, 0)
        else:
            (acc,) = accumulate_loops(ctx, bounds, [const(cet, 0)], body)
        return convert_value(ctx, cet, out_et, acc)

    return generate
