"""Which fused epilogues of a convolution its native kernel can apply as it stores the result.

A ResNet block's fusions are conv -> * scale[feature] -> + bias[feature] (-> + residual) ->
max(., 0): outlined (outline.py), the convolution writes a scratch buffer and an epilogue
kernel reads it back, a full pass over the activations. Where the chain from the convolution
to the fusion's root is such a sequence, the composite's convolution step records it
("epilogue"), and a runtime whose convolution kernel applies epilogues (runtime/cpu/
conv_native.py) computes the root straight into the output and skips the epilogue kernel
step; any other runtime path runs both steps as before. Ops, in order, name the fusion
operands they read (conv_gemm.Epilogue):

    ["mul_column", ref] / ["add_column", ref]  x op broadcast(p, dimensions={feature})
    ["add", ref]                               x + p, p shaped (and laid out) like x
    ["max_zero"] / ["zero_max"]                maximum(x, +0) / maximum(+0, x)
"""

from __future__ import annotations

import numpy as np

from ...ir import Computation, Instruction, Opcode, PrimitiveType
from .conv_gemm import EPILOGUE_OPS, Epilogue


def convolution_epilogue(comp: Computation, conv: Instruction) -> list[list] | None:
    """The epilogue ops leading from `conv` to `comp`'s root, or None (another form)."""
    if not _f32_array(conv) or comp.root is conv:
        return None
    ops: list[list] = []
    current = conv
    while current is not comp.root:
        following = list(current.users)
        if len(following) != 1 or len(ops) == EPILOGUE_OPS:
            return None
        op = _op(following[0], current, conv)
        if op is None:
            return None
        ops.append(op)
        current = following[0]
    return ops


def _f32_array(instr: Instruction) -> bool:
    return instr.shape.is_array and instr.shape.element_type == PrimitiveType.F32


def _op(user: Instruction, x: Instruction, conv: Instruction) -> list | None:
    """The epilogue op computing `user` from the chain value `x`, or None."""
    if user.shape != conv.shape or len(user.operands) != 2 or x not in user.operands:
        return None
    other = user.operands[1] if user.operands[0] is x else user.operands[0]
    if other is x:
        return None
    if user.opcode == Opcode.MAXIMUM:
        if not _zero_splat(other):
            return None
        return [(Epilogue.MAX_ZERO if user.operands[0] is x else Epilogue.ZERO_MAX).name.lower()]
    if user.opcode not in (Opcode.MULTIPLY, Opcode.ADD):
        return None
    feature = conv.attrs.conv_dnums.output_feature_dimension
    if other.opcode == Opcode.BROADCAST and tuple(other.dimensions) == (feature,) \
            and _parameter(other.operands[0]):
        name = "mul_column" if user.opcode == Opcode.MULTIPLY else "add_column"
        return [name, ["operand", other.operands[0].attrs.parameter_number]]
    if user.opcode == Opcode.ADD and _parameter(other) and other.shape == conv.shape:
        return ["add", ["operand", other.attrs.parameter_number]]
    return None


def _parameter(instr: Instruction) -> bool:
    return instr.opcode == Opcode.PARAMETER and _f32_array(instr)


def _zero_splat(instr: Instruction) -> bool:
    """An f32 broadcast of a constant +0.0 (every bit clear: maximum orders -0 below +0)."""
    while instr.opcode == Opcode.BROADCAST:
        instr = instr.operands[0]
    if instr.opcode != Opcode.CONSTANT or not _f32_array(instr) or instr.literal is None:
        return False
    values = np.ascontiguousarray(instr.literal.array)
    return values.size > 0 and not values.view(np.uint8).any()
