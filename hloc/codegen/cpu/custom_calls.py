"""Custom calls with native kernels, by target: XLA CPU's TopK (topk.py) and jax's LAPACK
triangular solve (trsm.py) and Cholesky factorization (potrf.py) of small matrices.

A custom-call thunk tries a kernel when its target is registered here and the entry's `wants`
accepts the call; `plan` gives the kernel's segment and `work` its size (the runtime's
parallel-split estimate). A call without a kernel keeps its runtime path (the LAPACK job,
the interpreter's implementation).
"""

from __future__ import annotations

from collections.abc import Callable

from ...ir import Instruction, Opcode
from ...registry import Registry
from ...util.record import dataclass
from .kernel import RootItem, Segment, special_segment
from .kernel_spec import KernelSpec
from .thunk_kernels import native_kind


@dataclass(frozen=True)
class CustomCallKernel:
    wants: Callable[[Instruction], bool]
    plan: Callable[[KernelSpec, RootItem], Segment | None]
    work: Callable[[Instruction], int]


CUSTOM_CALL_KERNELS: Registry[str, CustomCallKernel] = Registry(
    "CPU custom-call kernel", modules=("hloc.codegen.cpu.topk", "hloc.codegen.cpu.trsm",
                                              "hloc.codegen.cpu.potrf"))


def _entry(instr: Instruction) -> CustomCallKernel | None:
    if instr.opcode != Opcode.CUSTOM_CALL:
        return None
    return CUSTOM_CALL_KERNELS.get(instr.attrs.custom_call_target or "")


@native_kind("custom-call")
def wants_kernel(instr: Instruction) -> bool:
    entry = _entry(instr)
    return entry is not None and entry.wants(instr)


@special_segment(Opcode.CUSTOM_CALL)
def plan_custom_call(spec: KernelSpec, item: RootItem) -> Segment | None:
    entry = _entry(item.instr)
    return entry.plan(spec, item) if entry is not None and entry.wants(item.instr) else None


def custom_call_work(instr: Instruction) -> int:
    entry = _entry(instr)
    return entry.work(instr) if entry is not None else 0
