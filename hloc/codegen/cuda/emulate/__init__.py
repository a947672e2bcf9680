"""Host emulation of CUDA kernels: the kernel IR, with the hardware's rules for each
operation (ptxsem.py), compiled for the CPU (see transform.py)."""

from .host import EmulatedLibrary, build_host_ir, compile_for_host
from .transform import DONE, EmulatedKernel

__all__ = ["DONE", "EmulatedKernel", "EmulatedLibrary", "build_host_ir", "compile_for_host"]
