"""{re, im} complex struct values: building and taking apart (extractvalue / insertvalue)."""

from __future__ import annotations

from llvmlite import ir


def extract(builder: ir.IRBuilder, aggregate: ir.Value, k: int) -> ir.Value:
    return builder.extract_value(aggregate, k)


def insert(builder: ir.IRBuilder, aggregate: ir.Value, value: ir.Value, k: int) -> ir.Value:
    return builder.insert_value(aggregate, value, k)


def pair(builder: ir.IRBuilder, ty: ir.Type, re: ir.Value, im: ir.Value) -> ir.Value:
    """The struct {re, im} of type `ty`."""
    return insert(builder, insert(builder, ir.Constant(ty, ir.Undefined), re, 0), im, 1)


def parts(builder: ir.IRBuilder, z: ir.Value) -> tuple[ir.Value, ir.Value]:
    return extract(builder, z, 0), extract(builder, z, 1)
