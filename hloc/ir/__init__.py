"""hloc's HLO intermediate representation."""

from .attrs import (
    Attrs,
    CholeskyOptions,
    ConvDimensionNumbers,
    DotDimensionNumbers,
    GatherDimensionNumbers,
    OpMetadata,
    OutputOperandAliasing,
    PaddingDim,
    PrecisionConfig,
    ScatterDimensionNumbers,
    SliceDim,
    TriangularSolveOptions,
    Window,
    WindowDimension,
)
from .computation import Computation
from .dtypes import PrimitiveType
from .instruction import Instruction
from .literal import Literal
from .module import AliasEntry, BufferDonor, Module, ModuleConfig, ProgramShape, clone_computation
from .opcodes import Opcode
from .shape import Layout, Shape, ShapeIndex, Tile

__all__ = [
    "AliasEntry", "Attrs", "BufferDonor", "CholeskyOptions", "Computation", "ConvDimensionNumbers",
    "DotDimensionNumbers", "GatherDimensionNumbers", "Instruction", "Layout", "Literal", "Module",
    "ModuleConfig", "Opcode", "OpMetadata", "OutputOperandAliasing", "PaddingDim", "PrecisionConfig",
    "PrimitiveType", "ProgramShape", "ScatterDimensionNumbers", "Shape", "ShapeIndex", "SliceDim",
    "Tile", "TriangularSolveOptions", "Window", "WindowDimension", "clone_computation",
]
