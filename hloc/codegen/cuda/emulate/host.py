"""Build, compile and call emulated kernels on the host.

`build_host_ir(kernel_module, names)` rewrites the kernels of an llvmlite module (in place)
and adds their launch functions; `compile_for_host` turns that into object code for this
machine; `EmulatedLibrary` loads it and launches kernels on numpy-backed memory.
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor

import llvmlite.binding as llvm_binding
import numpy as np
from llvmlite import ir

from ....errors import CheckFailed
from ....util.record import dataclass
from ... import llvm
from ...target import host_target
from ..nvvm import SHARED_ADDRSPACE
from .driver import DIVERGED, EXITED_AT_SYNC, OK, emit_launch, launch_name
from .ptxsem import model_ptx
from .transform import EmulatedKernel, KernelTransform, shared_layout

_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * 6), ctypes.c_int64,
                           ctypes.c_int64)


@dataclass(frozen=True)
class HostIR:
    text: str
    kernels: dict[str, EmulatedKernel]


def build_host_ir(module: ir.Module, names: list[str]) -> HostIR:
    """Rewrite kernels `names` of `module` for the host and add their launch functions."""
    target = host_target()
    td = llvm_binding.create_target_data(target.data_layout)
    shared = shared_layout(module)
    # First the hardware's rules for each operation (ptxsem.py), on every defined function.
    for fn in [f for f in module.functions if f.blocks]:
        model_ptx(fn)
    kernels = {}
    for name in names:
        kernels[name] = KernelTransform(module, module.globals[name], td, shared).run()
    for gname in [g for g, v in module.globals.items()
                  if isinstance(v, ir.GlobalVariable) and v.addrspace == SHARED_ADDRSPACE]:
        del module.globals[gname]
    module.triple = target.triple
    module.data_layout = target.data_layout
    for info in kernels.values():
        emit_launch(module, info, target.is_x86)
    return HostIR(str(module), kernels)


def link_host_texts(texts: list[str]) -> str:
    """Link host modules (one per kernel) into one module's text."""
    llvm.initialize()
    target = host_target()
    main = llvm_binding.parse_assembly(f'target triple = "{target.triple}"\n'
                                       f'target datalayout = "{target.data_layout}"\n')
    for text in texts:
        main.link_in(llvm.parse(text))
    return str(main)


# The LLVM level of the host object. An emulated run is almost all compile: on the samples
# (2-core Zen 3) -O2 spent 16.2 s of CPU in LLVM for six of them (attention_grad 5.2 s, whose
# emulated run then takes 0.05 s) and -O0 1.2 s, with runs at most twice as long (0.09 s).
# The kernels' semantics do not depend on it: ptxsem makes every operation whose LLVM meaning
# leaves the answer open compute the hardware's answer before the host compile.
HOST_OPT_LEVEL = 0


def compile_for_host(ir_text: str | HostIR, opt_level: int = HOST_OPT_LEVEL) -> bytes:
    text = ir_text.text if isinstance(ir_text, HostIR) else ir_text
    return llvm.compile_ir(text, host_target(), opt_level).object_code


class EmulatedLibrary:
    """Emulated kernels loaded into this process; `launch` runs one grid."""

    def __init__(self, object_code: bytes, kernels: dict[str, EmulatedKernel],
                 workers: int | None = None):
        self.kernels = kernels
        self.library = llvm.JitLibrary(object_code)
        self._fns = {name: _LAUNCH(self.library.address(launch_name(name))) for name in kernels}
        self.workers = workers or min(8, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(self.workers) if self.workers > 1 else None

    def launch(self, name: str, grid, block, pointers: list[int]) -> None:
        """Run kernel `name` over grid x block with the given argument addresses."""
        info = self.kernels[name]
        blocks = int(np.prod(grid))
        if blocks == 0:
            return
        args = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
        dims = np.array(list(grid) + list(block), np.int32)
        chunks = self._chunks(blocks, info)
        if self._pool is None or len(chunks) == 1:
            codes = [self._run(name, info, args, dims, block, lo, hi) for lo, hi in chunks]
        else:
            codes = list(self._pool.map(lambda c: self._run(name, info, args, dims, block, *c),
                                        chunks))
        for code in codes:
            _check(name, code)

    def _chunks(self, blocks: int, info: EmulatedKernel):
        n = min(self.workers, blocks)
        bounds = np.linspace(0, blocks, n + 1).astype(np.int64)
        return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]

    def _run(self, name, info, args, dims, block, lo, hi) -> int:
        threads = int(np.prod(block))
        frames = np.zeros(max(1, info.frame_bytes * threads) + 16, np.uint8)
        shared = np.zeros(max(1, info.shared_bytes) + 16, np.uint8)
        exchange = np.zeros(threads + 1, np.int32)
        states = np.zeros(threads + 1, np.int32)
        ptrs = [a.ctypes.data for a in (dims, frames, shared, exchange, states)]
        ptrs[1] = (ptrs[1] + 15) // 16 * 16
        ptrs[2] = (ptrs[2] + 15) // 16 * 16
        return self._fns[name](ctypes.cast(args, ctypes.c_void_p), *ptrs, lo, hi)


def _check(name: str, code: int) -> None:
    if code == OK:
        return
    why = {DIVERGED: "threads of a block stopped at different barriers/shuffles",
           EXITED_AT_SYNC: "some threads of a block finished while others wait at a barrier"}
    raise CheckFailed(f"emulated kernel {name}: {why.get(code, f'error {code}')}")
