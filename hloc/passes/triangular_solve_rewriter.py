"""A triangular-solve becomes jax's LAPACK trsm call, which the CPU back end runs on LAPACK.

jax lowers `solve_triangular` on the CPU to the `lapack_?trsm_ffi` custom call when the
matrix has no batch dimensions, and to the HLO triangular-solve opcode when it has (a
Gaussian mixture's per-component solves, batched Cholesky solves). The CPU runtime had no
native code for the opcode: it ran the reference interpreter's substitution, row by row in
f64 NumPy, 1.4 ms for a mixture model's solves where XLA took a few microseconds. This pass
rewrites the opcode into the same custom call jax emits for one matrix, with the options in
jax's form; the call takes batch dimensions (one LAPACK call per matrix, runtime/lapack.py),
runs as a native job, and may run inside native loop drivers, as jax's own calls do. As XLA
GPU's TriangularSolveRewriter turns the opcode into a cuBLAS call, this one targets LAPACK.

f16 and bf16 solves are converted to f32 around the call (LAPACK has no half precision).
"""

from __future__ import annotations

from ..ir import Module, Opcode, PrimitiveType, Shape
from ..ir.custom_calls import SUPPORTED_TARGETS, lapack_config
from ..util.record import dataclass
from .base import Pass, register_pass
from .expand_builder import Emit
from .rewrite import P, RuleTable, new, rewrite_module

TRSM_RULES = RuleTable("triangular-solve-rewriter")
_b = Emit()
T = PrimitiveType
_PREFIX = {T.F32: "s", T.F64: "d", T.C64: "c", T.C128: "z"}
_WIDENED = {T.F16: T.F32, T.BF16: T.F32}
_TRANS = {2: "T", 3: "C"}  # transpose_a: 1 (or unset) NO_TRANSPOSE, 2 TRANSPOSE, 3 ADJOINT


def trsm_config(left_side: bool, lower: bool, unit_diagonal: bool, transpose_a: int) -> str:
    """jax's backend_config for its trsm call."""
    return lapack_config(diag="U" if unit_diagonal else "N", side="L" if left_side else "R",
                         trans_x=_TRANS.get(transpose_a, "N"), uplo="L" if lower else "U")


@TRSM_RULES.rule(P(Opcode.TRIANGULAR_SOLVE))
def to_trsm(instr):
    """triangular-solve(a, b) -> custom-call lapack_?trsm_ffi(a, b), in f32 for half types."""
    a, b = instr.operands
    ptype = instr.shape.element_type
    solved = _WIDENED.get(ptype, ptype)
    target = f"lapack_{_PREFIX.get(solved, '?')}trsm_ffi"
    if target not in SUPPORTED_TARGETS:
        return None
    if solved != ptype:
        a, b = _b.convert(a, solved), _b.convert(b, solved)
    opt = instr.attrs.triangular_solve_options
    call = new(Opcode.CUSTOM_CALL, Shape.array(solved, instr.shape.dims), [a, b],
               custom_call_target=target,
               backend_config=trsm_config(opt.left_side, opt.lower, opt.unit_diagonal,
                                          opt.transpose_a))
    call.metadata = instr.metadata
    return call if solved == ptype else _b.convert(call, ptype)


@register_pass
@dataclass
class TriangularSolveRewriter(Pass):
    """Every triangular-solve becomes jax's LAPACK trsm custom call.

    Assumes: a valid module. Guarantees: no triangular-solve of a floating-point or complex
    type remains; each is a `lapack_{s,d,c,z}trsm_ffi` custom call on the same operands with
    the same options (side, triangle, unit diagonal, transpose or adjoint), batch dimensions
    kept; f16 and bf16 operands are converted to f32 and the result back.
    """

    name = "triangular-solve-rewriter"

    def run(self, module: Module) -> bool:
        return rewrite_module(module, TRSM_RULES).changed
