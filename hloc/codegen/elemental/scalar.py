"""Scalar building blocks shared by the lowerings: typed constants, rounding, max/min, etc.

Every function takes the EmitContext and LLVM values in register form (see types.py) and
returns register-form values. Narrow-float results must pass through `finish`.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, PrimitiveType
from . import lowfloat
from .compose import operand_index
from .types import F64, ElemType, elem_type


def const(et: ElemType, value) -> ir.Constant:
    """A constant of the register type of `et`."""
    if et.is_float:
        return ir.Constant(et.value_type, float(value))
    if et.kind == "pred":
        return ir.Constant(et.value_type, 1 if value else 0)
    return ir.Constant(et.value_type, int(value) & ((1 << et.bits) - 1))


def all_ones(et: ElemType) -> ir.Constant:
    return ir.Constant(et.value_type, (1 << et.bits) - 1)


def int_min(et: ElemType) -> ir.Constant:
    return ir.Constant(et.value_type, 1 << (et.bits - 1))


def finish(ctx, et: ElemType, value: ir.Value) -> ir.Value:
    """Round an f32 result to the narrow float type `et` (identity for other types)."""
    if et.is_narrow_float:
        return lowfloat.round_to(ctx, et, value)
    return value


def float_suffix(value: ir.Value) -> str:
    return "f64" if value.type == F64 else "f32"


def fmax(ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    """IEEE maximum: NaN-propagating, +0 > -0 (XLA's float max)."""
    return ctx.call(f"llvm.maximum.{float_suffix(a)}", [a, b])


def fmin(ctx, a: ir.Value, b: ir.Value) -> ir.Value:
    return ctx.call(f"llvm.minimum.{float_suffix(a)}", [a, b])


def unary_float(ctx, name: str, x: ir.Value) -> ir.Value:
    """A unary LLVM float intrinsic (fabs, floor, ceil, roundeven, round, sqrt, ...)."""
    return ctx.call(f"llvm.{name}.{float_suffix(x)}", [x])


def is_nan(ctx, x: ir.Value) -> ir.Value:
    return ctx.builder.fcmp_unordered("uno", x, x)


def out_type(instr: Instruction) -> ElemType:
    return elem_type(instr.shape.element_type)


def operand_type(instr: Instruction, i: int = 0) -> ElemType:
    return elem_type(instr.operands[i].shape.element_type)


def int_bits_of_float(value: ir.Value) -> ir.IntType:
    return ir.IntType(64 if value.type == F64 else 32)


# Per-kind implementations of one elementwise opcode: fn(ctx, instr, values) -> value.
KindFn = Callable[..., ir.Value]


def elementwise(rules: dict[str, KindFn], *, operand: int = 0):
    """A lowering that dispatches on the element kind of operand `operand`.

    `rules` maps "float" / "int" / "uint" / "pred" ("integral" covers int and uint) to
    fn(ctx, instr, values, et) computing one element; float results are finished (rounded to
    narrow types) here.
    """

    def lowering(ctx, instr: Instruction, gens):
        et = operand_type(instr, operand)
        fn = rules.get(et.kind) or (rules.get("integral") if et.is_integral else None)
        if fn is None:
            raise UnsupportedError(f"{instr.opcode.value} is not supported for "
                                   f"{PrimitiveType(et.ptype).name.lower()} operands "
                                   f"(instruction %{instr.name})")
        result_et = out_type(instr)

        def generate(index):
            values = [g(operand_index(instr, i, index)) for i, g in enumerate(gens)]
            return finish(ctx, result_et, fn(ctx, instr, values, et))

        return generate

    return lowering

