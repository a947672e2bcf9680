"""Make host code compute what the PTX for a kernel computes on NVIDIA hardware.

The emulator compiles the kernel's LLVM IR for the host, where x86 would answer several
operations differently from the GPU that runs the PTX NVPTX makes of the same IR. Before the
kernel transform, `model_ptx(fn)` rewrites each such IR operation into host IR that gives the
hardware's answer. The rules, as measured on an NVIDIA H200 (sm_90, driver 580) with one PTX
instruction per case (tests/test_cuda_emulator_rules.py holds the measured values):

- NaN results: add/sub/mul/div/fma/sqrt (`add.f32` ...), rounding to integral values
  (`cvt.rni/rmi/rpi/rzi.f32.f32`), float-to-float conversions (`cvt.rn.f16.f32`,
  `cvt.f32.f16`) and `abs`/`neg` return the canonical NaN 0x7fffffff (f16/bf16 0x7fff) —
  x86 returns the first NaN operand made quiet, or 0xffc00000 for an invalid operation.
- `neg.ftz.f32`/`abs.ftz.f32` (fneg/fabs in a kernel whose f32 denormals flush) flush a
  subnormal input to a zero (x86's xorps/andps never flush).
- `min.f32`/`max.f32` (llvm.minnum/maxnum) return the other operand for one NaN and the
  canonical NaN for two; `min.NaN.f32`/`max.NaN.f32` (llvm.minimum/maximum) the canonical NaN
  for any NaN; both order -0 < +0.
- `frem` is not a PTX instruction: NVPTX expands it to fma(-trunc(x / y), y, x), or x where
  y is infinite (inexact for large quotients; -0 becomes +0).
- `cvt.rzi.s32.f32` and friends saturate, and NaN converts to 0 (IR says poison; x86 gives
  0x80000000).
- `div`/`rem` by zero give all ones (the PTX ISA leaves them unspecified; x86 would trap);
  INT_MIN / -1 is INT_MIN and INT_MIN % -1 is 0.
- the opaque bit move `mov.bN $0, $1;` (elemental/nanbits.float_bits) is a bitcast.
Subnormals: the launch code runs with x86 FTZ/DAZ, the `.ftz` of every f32 instruction. That
also flushes f64 subnormals, which the hardware keeps (a known gap of the emulator).
Inline PTX other than the bit move is refused rather than guessed at.
"""

from __future__ import annotations

from llvmlite import ir

from ..nvvm import F32_FTZ
from .ptxsem_rules import (
    Model,
    canonical_nan,
    float_to_int,
    frem,
    inline_asm,
    int_div,
    min_max,
    sign_op,
)
from .transform import replace_use

_ARITH_CALLS = {"sqrt", "fma", "fmuladd"}
_ROUNDING_CALLS = {"floor", "ceil", "trunc", "roundeven", "rint", "nearbyint", "round"}
_BY_OPNAME = {"fadd": canonical_nan, "fsub": canonical_nan, "fmul": canonical_nan,
              "fdiv": canonical_nan, "fneg": sign_op, "frem": frem,
              "fptrunc": canonical_nan, "fpext": canonical_nan,
              "fptosi": float_to_int, "fptoui": float_to_int,
              "sdiv": int_div, "srem": int_div, "udiv": int_div, "urem": int_div}


def model_ptx(fn: ir.Function) -> int:
    """Rewrite `fn` in place (see the module docstring); the number of operations modelled."""
    model = Model(ir.IRBuilder(), F32_FTZ in {str(a) for a in fn.attributes})
    mapping: dict[ir.Instruction, ir.Value] = {}
    for blk in fn.blocks:
        for instr in list(blk.instructions):
            rule = _rule_for(instr)
            if rule is None:
                continue
            model.b.position_after(instr)
            mapping[instr] = rule(model, instr)
    _replace_uses(fn, mapping, model.parts)
    for instr in mapping:  # inline PTX must not reach the host back end (its constraints)
        if isinstance(instr, ir.CallInstr) and isinstance(instr.callee, ir.InlineAsm):
            instr.parent.instructions.remove(instr)
    return len(mapping)


def _replace_uses(fn: ir.Function, mapping: dict, parts: set[int]) -> None:
    """Point every original use of a modelled instruction at its model (the model's own
    instructions, built from the instruction, keep using it)."""
    for blk in fn.blocks:
        for instr in blk.instructions:
            if id(instr) in parts:
                continue
            for op in list(instr.operands):
                if isinstance(op, ir.Instruction) and op in mapping:
                    replace_use(instr, op, mapping[op])


def _rule_for(instr):
    if isinstance(instr, ir.CallInstr) and isinstance(instr.callee, ir.InlineAsm):
        return inline_asm
    rule = _BY_OPNAME.get(instr.opname)
    if rule is not None:
        return rule
    if not (isinstance(instr, ir.CallInstr) and isinstance(instr.callee, ir.Function)):
        return None
    parts = instr.callee.name.split(".")
    if parts[0] != "llvm" or len(parts) < 2:
        return None
    if parts[1] in _ARITH_CALLS or parts[1] in _ROUNDING_CALLS:
        return canonical_nan
    if parts[1] == "fabs":
        return sign_op
    if parts[1] in ("minnum", "maxnum", "minimum", "maximum"):
        return min_max
    return None
