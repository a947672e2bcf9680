"""Rough floating-point operation counts of HLO instructions, for `hlo-run --trace`.

A multiply-add counts 2. dot: 2 x output elements x contracted size; convolution: 2 x output
elements x (kernel elements / output features); fft: 5 N log2 N per transform; reduce and
reduce-window: one op per input element; elementwise arithmetic: one per output element;
a fusion: the sum over its fused instructions. Data movement (reshape, transpose, slice,
broadcast, gather, copies ...) counts 0. None where nothing can be said (no instruction).
"""

from __future__ import annotations

import math

from ..ir import Opcode

_MOVES = {"parameter", "constant", "tuple", "get-tuple-element", "reshape", "bitcast", "transpose",
          "broadcast", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate", "pad",
          "gather", "scatter", "copy", "iota", "reverse", "convert", "bitcast-convert", "while",
          "conditional", "call", "custom-call", "sort", "after-all", "rng-bit-generator",
          "get-dimension-size", "select-and-scatter", "fusion", "partition-id", "replica-id"}


def _elements(shape) -> int:
    if shape.is_tuple:
        return sum(_elements(s) for s in shape.tuple_shapes)
    return shape.num_elements if shape.is_array else 0


def instruction_flops(instr) -> int:
    """FLOPs of one instruction (a fusion: its fused computation)."""
    op = instr.opcode
    if op == Opcode.FUSION:
        return sum(instruction_flops(i) for i in instr.called[0].instructions) if instr.called else 0
    if op == Opcode.DOT:
        dn = instr.attrs.dot_dnums
        lhs = instr.operands[0].shape.dims
        k = math.prod(lhs[d] for d in dn.lhs_contracting_dimensions) if dn else 1
        return 2 * _elements(instr.shape) * k
    if op == Opcode.CONVOLUTION:
        dn = instr.attrs.conv_dnums
        kernel = instr.operands[1].shape
        per_output = kernel.num_elements // max(kernel.dims[dn.kernel_output_feature_dimension], 1)
        return 2 * _elements(instr.shape) * per_output
    if op == Opcode.FFT:
        n = math.prod(instr.attrs.fft_length or (1,))
        return int(5 * _elements(instr.shape) * math.log2(max(n, 2)))
    if op in (Opcode.REDUCE, Opcode.REDUCE_WINDOW):
        return sum(_elements(o.shape) for o in instr.operands[: len(instr.operands) // 2])
    if op.value in _MOVES:
        return 0
    return _elements(instr.shape)
