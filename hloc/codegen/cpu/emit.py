"""emit_kernels: every kernel of a module into one LLVM module and one object file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from llvmlite import ir

from ...errors import InputError
from .. import llvm
from .kernel import emit_kernel
from .kernel_spec import KernelInfo, KernelSpec


@dataclass(frozen=True)
class KernelModuleInfo:
    """Metadata of an emitted kernel object: per-kernel facts plus the later compile stages."""

    kernels: dict[str, KernelInfo]
    target: dict
    opt_level: int
    optimized_ir: str = field(repr=False, default="")
    assembly: str | None = field(repr=False, default=None)

    def to_json(self) -> dict:
        return {"target": self.target, "opt_level": self.opt_level,
                "kernels": [k.to_json() for k in self.kernels.values()]}


class EmittedKernels(NamedTuple):
    llvm_ir: str
    object_code: bytes
    metadata: KernelModuleInfo


def build_llvm_module(specs: list[KernelSpec], target, name: str = "hloc_kernels"):
    """The unoptimized LLVM module (llvmlite.ir) for `specs` and each kernel's info."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise InputError(f"duplicate kernel names in {sorted(names)}")
    module = ir.Module(name=name)
    module.triple = target.triple
    module.data_layout = target.data_layout
    infos = {s.name: emit_kernel(module, s, target) for s in specs}
    return module, infos


def emit_kernels(specs, target, opt_level: int = 2, *, assembly: bool = False) -> EmittedKernels:
    """Emit, optimize and compile `specs` into one relocatable object for `target`."""
    module, infos = build_llvm_module(list(specs), target)
    text = str(module)
    compiled = llvm.compile_ir(text, target, opt_level, assembly=assembly)
    meta = KernelModuleInfo(infos, target.describe(), opt_level, compiled.optimized_ir,
                            compiled.assembly)
    return EmittedKernels(text, compiled.object_code, meta)
