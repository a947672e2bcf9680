"""extractvalue / insertvalue for complex {re, im} structs, safe to rewrite after emission.

llvmlite prints these two instructions from fields it sets at construction, so
`Instruction.replace_usage` (which edits only the operand list) leaves them pointing at the
old value. The CUDA emulator rewrites finished kernels that way (spilling values across
barriers, replacing shuffles), so complex code builds them with the subclasses below, which
print from their operands.
"""

from __future__ import annotations

from llvmlite import ir
from llvmlite.ir import instructions as llvm_instructions


class _Extract(llvm_instructions.ExtractValue):
    def descr(self, buf):
        self.aggregate = self.operands[0]
        super().descr(buf)


class _Insert(llvm_instructions.InsertValue):
    def descr(self, buf):
        self.aggregate, self.value = self.operands
        super().descr(buf)


def extract(builder: ir.IRBuilder, aggregate: ir.Value, k: int) -> ir.Value:
    instr = _Extract(builder.block, aggregate, [k])
    builder._insert(instr)  # what IRBuilder.extract_value does with its own class
    return instr


def insert(builder: ir.IRBuilder, aggregate: ir.Value, value: ir.Value, k: int) -> ir.Value:
    instr = _Insert(builder.block, aggregate, value, [k])
    builder._insert(instr)
    return instr


def pair(builder: ir.IRBuilder, ty: ir.Type, re: ir.Value, im: ir.Value) -> ir.Value:
    """The struct {re, im} of type `ty`."""
    return insert(builder, insert(builder, ir.Constant(ty, ir.Undefined), re, 0), im, 1)


def parts(builder: ir.IRBuilder, z: ir.Value) -> tuple[ir.Value, ir.Value]:
    return extract(builder, z, 0), extract(builder, z, 1)
