"""Transposed convolutions as one convolution per output phase (CPU pipelines).

A convolution with base (lhs) dilation d reads an input with d - 1 holes between elements:
with stride 1 and no window dilation, output o = r + d * m (phase r) only meets input
elements through the taps k = k0 + d * t with k0 = (pad_low - r) mod d, and tap t then reads
input element m + t + e, e = (r + k0 - pad_low) / d. So each phase is an ordinary convolution
of the undilated input with the kernel's taps k0, k0 + d, ... (a strided slice; reversed
windows slice from the other end) and padding_low -e. The CPU runtime builds a dilated,
padded copy of the input and multiplies every tap, so a 2-D transposed convolution with
d = 2 did four times the work; here the phases do one quarter each, and a concatenate and
reshape per dilated dimension interleave their outputs (every phase computes
ceil(OUT / d) outputs; a slice drops the extra ones).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

from ..ir import Instruction, Module, Opcode, Shape
from ..ir.attrs import SliceDim, Window, WindowDimension
from ..util.record import dataclass
from .base import Pass, option, register_pass
from .rewrite import P, RuleTable, new, rewrite_module, splat

Op = Opcode
MAX_PHASES = 16  # phases (the product of the dilations) one convolution may split into


@dataclass(frozen=True)
class Phase:
    """Phase r of one dilated window dimension: the sub-window and the kernel slice."""

    window: WindowDimension  # size 0: no tap of this phase meets an input element
    kernel: SliceDim

    @staticmethod
    def of(wd: WindowDimension, r: int, inputs: int, outputs: int) -> Phase:
        d, size = wd.base_dilation, wd.size
        k0 = (wd.padding_low - r) % d
        taps = max(0, -(-(size - k0) // d))
        e = (r + k0 - wd.padding_low) // d  # exact: d divides r + k0 - pad_low
        high = outputs - 1 + taps - inputs + e
        last = k0 + d * (taps - 1)  # the phase's last tap
        # A reversed window reads kernel index size - 1 - k for tap k: slice from the end.
        start = size - 1 - last if wd.window_reversal else k0
        return Phase(WindowDimension(taps, 1, -e, high, 1, 1, wd.window_reversal),
                     SliceDim(start, start + d * (taps - 1) + 1, d))


def _splits(conv: Instruction, min_macs: int) -> bool:
    """A convolution with base dilation whose dilated dimensions have stride 1 and no window
    dilation, into at most MAX_PHASES phases, of at least `min_macs` multiply-adds."""
    window = conv.attrs.window
    if window is None or not conv.shape.is_array or conv.shape.num_elements == 0:
        return False
    dilated = [wd for wd in window.dims if wd.base_dilation > 1]
    if not dilated or any(wd.stride != 1 or wd.window_dilation != 1 for wd in dilated):
        return False
    rhs = conv.operands[1].shape
    cg = rhs.dims[conv.attrs.conv_dnums.kernel_input_feature_dimension]
    macs = conv.shape.num_elements * cg * math.prod(wd.size for wd in window.dims)
    return math.prod(wd.base_dilation for wd in dilated) <= MAX_PHASES and macs >= min_macs


def split_phases(conv: Instruction) -> Instruction:
    """convolution(x, w) with base dilation → the phases' convolutions, interleaved."""
    dn, window = conv.attrs.conv_dnums, conv.attrs.window.dims
    lhs = conv.operands[0].shape
    dilated = [i for i, wd in enumerate(window) if wd.base_dilation > 1]
    out_dims = [dn.output_spatial_dimensions[i] for i in dilated]
    per_phase = list(conv.shape.dims)
    phases = {}
    for i, d in zip(dilated, out_dims, strict=True):
        wd, per_phase[d] = window[i], -(-conv.shape.dims[d] // window[i].base_dilation)
        phases[i] = [Phase.of(wd, r, lhs.dims[dn.input_spatial_dimensions[i]], per_phase[d])
                     for r in range(wd.base_dilation)]
    shape = conv.shape.with_dims(per_phase)
    results = {rs: _phase(conv, shape, {i: phases[i][r] for i, r in zip(dilated, rs, strict=True)})
               for rs in itertools.product(*(range(window[i].base_dilation) for i in dilated))}
    out = _interleave(results, [window[i].base_dilation for i in dilated], out_dims, ())
    if out.shape.dims == conv.shape.dims:
        return out
    limits = [SliceDim(0, n, 1) for n in conv.shape.dims]
    return new(Op.SLICE, conv.shape, [out], slice=tuple(limits))


def _phase(conv: Instruction, shape: Shape, phases: dict[int, Phase]) -> Instruction:
    """One phase's convolution (zeros where some dimension has no tap in this phase)."""
    if any(p.window.size == 0 for p in phases.values()):
        return splat(0, shape)
    dn, x, w = conv.attrs.conv_dnums, *conv.operands
    cuts = [SliceDim(0, n, 1) for n in w.shape.dims]
    for i, p in phases.items():
        cuts[dn.kernel_spatial_dimensions[i]] = p.kernel
    taps = [-(-(c.limit - c.start) // c.stride) for c in cuts]
    kernel = new(Op.SLICE, w.shape.with_dims(taps), [w], slice=tuple(cuts))
    dims = tuple(phases[i].window if i in phases else wd
                 for i, wd in enumerate(conv.attrs.window.dims))
    return Instruction(Op.CONVOLUTION, shape, [x, kernel], called=list(conv.called),
                       attrs=replace(conv.attrs, window=Window(dims)))


def _interleave(results: dict, dilations: list[int], out_dims: list[int],
                prefix: tuple) -> Instruction:
    """The phases under `prefix` (phase indices of the first dilated dimensions) with the
    remaining dimensions' phases interleaved: output m * d + r of a dimension is phase r's
    output m (a concatenate along a new axis after it, then a reshape merging the two)."""
    level = len(prefix)
    if level == len(dilations):
        return results[prefix]
    parts = [_interleave(results, dilations, out_dims, prefix + (r,))
             for r in range(dilations[level])]
    dims, at = list(parts[0].shape.dims), out_dims[level]
    et = parts[0].shape.element_type
    unit = Shape.array(et, dims[:at + 1] + [1] + dims[at + 1:])
    stacked = new(Op.CONCATENATE, Shape.array(et, dims[:at + 1] + [len(parts)] + dims[at + 1:]),
                  [new(Op.RESHAPE, unit, [p]) for p in parts], dimensions=(at + 1,))
    dims[at] *= len(parts)
    return new(Op.RESHAPE, Shape.array(et, dims), [stacked])


@register_pass()
@dataclass
class ConvPhases(Pass):
    """Splits base-dilated (transposed) convolutions into one convolution per output phase.

    Assumes: a valid module, before layout assignment. Guarantees: every convolution it
    matches (see `_splits`) becomes convolutions without base dilation of the same input and
    strided slices of the kernel, interleaved by concatenates and reshapes (and a slice) into
    the original result; each output element sums the same nonzero products as before.
    """

    name = "conv-phases"
    # codegen.cpu.conv.NATIVE_MAX_MACS: smaller convolutions run in the native kernel, which
    # skips the holes itself (windows.TapSequence), cheaper than more thunks.
    min_macs: int = option(1 << 23, minimum=0)

    def run(self, module: Module) -> bool:
        rules = RuleTable("conv-phases")
        rules.rule(P(Op.CONVOLUTION, where=lambda c: _splits(c, self.min_macs)))(split_phases)
        return rewrite_module(module, rules).changed
