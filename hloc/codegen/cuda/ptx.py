"""NVPTX code through llvmlite: kernel LLVM IR → optimized IR → PTX text, per SM architecture.

All llvmlite.binding work for the CUDA target lives here (hloc/codegen/llvm.py initializes
only the host target). LLVM 22's NVPTX back end picks the PTX ISA version from the
architecture (7.0 for sm_80, 7.8 for sm_90); CUDA 13's ptxas accepts those. When an emitted
`.version` is newer than the ptxas at hand can read, `limit_ptx_version` lowers it (the
kernels use no instruction newer than PTX 7.0) and says so in a note.
"""

from __future__ import annotations

import re
import threading
from dataclasses import field

import llvmlite.binding as llvm

from ...errors import UnsupportedError
from ...util.record import dataclass
from .. import llvm as codegen_llvm
from .target import TRIPLE, CudaTarget

_LOCK = threading.Lock()
_ready = False
_VERSION = re.compile(r"^\.version\s+(\d+)\.(\d+)\s*$", re.M)


def initialize() -> None:
    """Initialize every LLVM target once; UnsupportedError if llvmlite lacks NVPTX."""
    global _ready
    with _LOCK:
        if _ready:
            return
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        try:
            llvm.Target.from_triple(TRIPLE)
        except RuntimeError:
            raise UnsupportedError("this llvmlite build has no NVPTX target; --target cuda "
                                   "needs an llvmlite with NVPTX (the PyPI wheels have it)") from None
        _ready = True


def target_machine(arch: str, opt_level: int = 3):
    initialize()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch, opt=min(opt_level, 3))


@dataclass(frozen=True)
class PtxResult:
    """The PTX of one architecture, plus the optimized IR it came from."""

    arch: str
    ptx: str
    optimized_ir: str = field(repr=False, default="")
    notes: tuple[str, ...] = ()


def parse(ir_text: str):
    """Parse and verify kernel IR with every target initialized (NVPTX included)."""
    initialize()
    return codegen_llvm.parse(ir_text)


def optimize(module, tm, opt_level: int) -> None:
    """LLVM's default -O pipeline for NVPTX (address-space inference, unrolling, ...)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=min(opt_level, 3))
    pto.loop_unrolling = opt_level >= 1
    pass_builder = llvm.create_pass_builder(tm, pto)
    pass_builder.getModulePassManager().run(module, pass_builder)


def emit_ptx(ir_text: str, arch: str, opt_level: int = 3, *,
             max_version: tuple[int, int] | None = None) -> PtxResult:
    """Optimize kernel IR for `arch` and print it as PTX."""
    tm = target_machine(arch, opt_level)
    module = parse(ir_text)
    module.triple = TRIPLE
    module.data_layout = str(tm.target_data)
    if opt_level > 0:
        optimize(module, tm, opt_level)
    module.verify()
    ptx = tm.emit_assembly(module)
    ptx, notes = limit_ptx_version(ptx, max_version)
    return PtxResult(arch, ptx, str(module), notes)


def compile_ptx(ir_text: str, target: CudaTarget, opt_level: int = 3,
                max_version: tuple[int, int] | None = None) -> dict[str, PtxResult]:
    """PTX for every architecture of `target`, keyed by arch."""
    return {arch: emit_ptx(ir_text, arch, opt_level, max_version=max_version)
            for arch in target.archs}


def ptx_version(ptx: str) -> tuple[int, int] | None:
    m = _VERSION.search(ptx)
    return (int(m.group(1)), int(m.group(2))) if m else None


def limit_ptx_version(ptx: str, max_version: tuple[int, int] | None) -> tuple[str, tuple[str, ...]]:
    """Lower `.version` to `max_version` when the PTX declares a newer one."""
    version = ptx_version(ptx)
    if max_version is None or version is None or version <= max_version:
        return ptx, ()
    new = f".version {max_version[0]}.{max_version[1]}"
    note = (f"PTX .version {version[0]}.{version[1]} lowered to {max_version[0]}."
            f"{max_version[1]} for the available ptxas")
    return _VERSION.sub(new, ptx, count=1), (note,)


def link_texts(texts: list[str], name: str = "hloc_kernels") -> str:
    """Link LLVM IR modules (each one kernel) into one module's text."""
    initialize()
    main = llvm.parse_assembly(f'; ModuleID = "{name}"\n'
                               f'target triple = "{TRIPLE}"\n')
    for text in texts:
        part = parse(text)
        main.link_in(part)
    return str(main)
