"""bf16 dots read their bf16 operands: the CPU GEMM multiplies them without converted copies.

Float normalization computes a bf16 dot as an f32 one of converted operands, `dot(convert(x:
bf16): f32, convert(w: bf16): f32): f32`, which is what XLA CPU's values are: bf16 values are
exact in f32, and the f32 products of two of them are exact too, so only the order of the
f32 additions can differ between ways of computing it. Left so, each operand is converted
into an f32 buffer of its own (twice the bytes, written and read again each run) and the
product runs on f32 micro-kernels. This pass makes such a dot read `x` and `w` themselves,
`dot(x, w): f32`, and the native GEMM computes it with `vdpbf16ps` where the host has
AVX512_BF16 (two multiply-adds per lane and instruction, as XLA's own library does), else
widening bf16 to f32 as it packs (codegen/cpu/gemm.py). A converted operand that something
else still reads keeps its convert.

Only dots the CPU back end runs as library products change (codegen/cpu/dot.kernel_gemm):
the small, narrow and batched-small ones its tiled kernels compute keep their f32 operands,
the form those kernels were tuned on.

Assumes: float-normalization and layout-assignment have run. Guarantees: only dots with an
f32 result whose operands are both converts from bf16 to f32 change, each to read the
converts' operands (the same values, products and sums in f32); converts left without users
are removed.
"""

from __future__ import annotations

from ..ir import Instruction, Module, Opcode, PrimitiveType
from ..util.record import dataclass
from .base import Pass, register_pass


def _widened_bf16(x: Instruction) -> bool:
    """Whether x is a convert of a bf16 array to f32."""
    return (x.opcode == Opcode.CONVERT and x.shape.element_type == PrimitiveType.F32
            and x.operands[0].shape.element_type == PrimitiveType.BF16
            and not x.control_predecessors and not x.control_successors)


@register_pass
@dataclass
class Bf16DotOperands(Pass):
    """Makes library-sized f32 dots of converted bf16 operands read the bf16 operands."""

    name = "bf16-dot-operands"

    def run(self, module: Module) -> bool:
        from ..codegen.cpu.dot import kernel_gemm

        changed = False
        for comp in module.computations:
            if comp.is_fusion:
                continue
            for dot in list(comp.instructions):
                if (dot.opcode != Opcode.DOT or dot.shape.element_type != PrimitiveType.F32
                        or not all(_widened_bf16(o) for o in dot.operands) or kernel_gemm(dot)):
                    continue
                converts = list(dot.operands)
                for k, convert in enumerate(converts):
                    dot.replace_operand(k, convert.operands[0])
                for convert in set(converts):
                    if not convert.users and not convert.is_root:
                        comp.remove(convert)
                changed = True
        return changed
