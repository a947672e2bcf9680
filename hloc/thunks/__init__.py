"""The target-neutral thunk schedule: data types, emission from a scheduled and assigned
module, and the bundle (JSON) and text forms."""

from .emit import emit_program
from .serialize import VERSION, program_from_json, program_to_json, program_to_text
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
    Thunk,
    ThunkProgram,
    While,
)

__all__ = [
    "THUNK_KINDS", "VERSION", "Conditional", "Convolution", "Copy", "CustomCall", "Fft", "Gemm",
    "Kernel", "Memset", "Sequential", "Sort", "StreamAssignment", "Thunk", "ThunkProgram", "While",
    "emit_program", "program_from_json", "program_to_json", "program_to_text",
]
