"""The thunk model: kinds and the Thunk base (base.py), the target-neutral program
(thunks.py), the GPU program (gpu.py), emission from a scheduled and assigned module, and the
bundle (JSON) and text forms of both programs."""

from .base import Thunk, ThunkKind, Visit, footprint, kind_counts, map_nested, walk
from .emit import emit_program
from .serialize import (
    VERSION,
    gpu_program_from_json,
    gpu_program_to_json,
    program_from_json,
    program_to_json,
)
from .text import gpu_program_to_text, program_to_text
from .thunks import (
    THUNK_KINDS,
    Conditional,
    Convolution,
    Copy,
    CustomCall,
    Fft,
    Gemm,
    Kernel,
    Memset,
    Sequential,
    Sort,
    StreamAssignment,
    ThunkProgram,
    While,
)

__all__ = [
    "THUNK_KINDS", "VERSION", "Conditional", "Convolution", "Copy", "CustomCall", "Fft", "Gemm",
    "Kernel", "Memset", "Sequential", "Sort", "StreamAssignment", "Thunk", "ThunkKind",
    "ThunkProgram", "Visit", "While", "emit_program", "footprint", "gpu_program_from_json",
    "gpu_program_to_json", "gpu_program_to_text", "kind_counts", "map_nested",
    "program_from_json", "program_to_json", "program_to_text", "walk",
]
