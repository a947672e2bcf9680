"""What one thunk reads and writes, as typed arrays, and what the reference says it should write.

For a thunk that executes one HLO instruction (kernel — a fusion or a single op —, gemm,
convolution, sort, fft, custom-call, the GPU's host compute) the operands are the
instruction's operands, read from the thunk's `reads()` slices (array leaves depth-first), the
outputs the array leaves of its result at `writes()`, and the reference is the NumPy
interpreter's implementation of the instruction (a fusion: its fused computation) on those
operands. A copy's reference is its source bytes, a memset's its byte; both are typed by the
instruction of the same name when it has one of the right size (raw bytes otherwise).
Control-flow thunks have no outputs of their own: the thunks nested in them are checked.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..buffers.assignment import Slice
from ..ir import Instruction, Opcode, Shape
from ..runtime.layouts import physical_order
from ..thunks.base import Thunk
from ..thunks.thunks import Copy, Memset
from ..util.record import dataclass

Raw = Callable[[Slice], np.ndarray]


def typed(raw: np.ndarray, shape: Shape) -> np.ndarray:
    """Bytes `raw` as an array of `shape` in logical index order (a view)."""
    order = physical_order(shape)
    if order is None:
        return raw.view(shape.np_dtype).reshape(shape.dims)
    phys = raw.view(shape.np_dtype).reshape([shape.dims[d] for d in order])
    return phys.transpose(np.argsort(order))


def leaf_shapes(shape: Shape) -> list[Shape]:
    """The array leaves of `shape`, depth-first (the order of a thunk's slices)."""
    if shape.is_tuple:
        return [leaf for s in shape.tuple_shapes for leaf in leaf_shapes(s)]
    return [shape] if shape.is_array else []


def leaves(value) -> list:
    """The array leaves of a (nested tuple) value, depth-first."""
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in leaves(v)]
    return [] if value is None else [value]


@dataclass(frozen=True)
class ThunkIO:
    """One checkable thunk: its instruction (None: copy/memset), inputs and output leaves."""

    thunk: Thunk
    instruction: Instruction | None
    outputs: tuple[tuple[Shape, Slice], ...]

    @property
    def kind(self) -> str:
        return str(self.thunk.kind)

    def read_inputs(self, raw: Raw) -> list:
        """Copies of the inputs (instruction operands as values; a copy's source bytes)."""
        if isinstance(self.thunk, Copy):
            return [raw(self.thunk.source).copy()]
        if isinstance(self.thunk, Memset):
            return []
        pending = list(self.thunk.reads())
        return [_read(raw, op.shape, pending) for op in self.instruction.operands]

    def views(self, raw: Raw) -> list[np.ndarray]:
        """Writable views of the output leaves."""
        return [typed(raw(s), shape) for shape, s in self.outputs]

    def reference(self, inputs: list) -> list[np.ndarray]:
        """The outputs the reference computes from `inputs` (as read by read_inputs)."""
        if isinstance(self.thunk, Copy):
            return [typed(inputs[0], self.outputs[0][0]).copy()]
        if isinstance(self.thunk, Memset):
            size = self.thunk.destination.size
            return [typed(np.full(size, self.thunk.byte, np.uint8), self.outputs[0][0]).copy()]
        return [np.asarray(v).astype(shape.np_dtype, copy=False)
                for v, (shape, _) in zip(self.evaluate(self.instruction, inputs), self.outputs,
                                         strict=True)]

    def evaluate(self, instr: Instruction, inputs: list) -> list[np.ndarray]:
        """`instr` (this thunk's instruction, or its twin in another version of the module)
        on the interpreter: the output leaves in the types it computes."""
        from ..runtime.interpreter import evaluate_computation, registry

        result = registry.lookup(instr)(registry.Context(evaluate_computation), instr, inputs)
        return [np.asarray(v).reshape(shape.dims)
                for v, (shape, _) in zip(leaves(result), self.outputs, strict=True)]


def _read(raw: Raw, shape: Shape, pending: list[Slice]):
    if shape.is_tuple:
        return tuple(_read(raw, s, pending) for s in shape.tuple_shapes)
    if not shape.is_array:
        return None
    return np.array(typed(raw(pending.pop(0)), shape))


def thunk_io(thunk: Thunk, instructions: dict[str, Instruction]) -> ThunkIO | None:
    """The ThunkIO of a target-neutral (or GPU host-compute) leaf thunk; None for control
    flow and for thunks whose slices do not match their instruction."""
    instr = instructions.get(thunk.name)
    if isinstance(thunk, (Copy, Memset)):
        dest = thunk.destination
        shape = _sized(instr, dest.size)
        return ThunkIO(thunk, None, ((shape, dest),))
    if thunk.nested() or instr is None or instr.opcode in _CONTROL:
        return None
    shapes = leaf_shapes(instr.shape)
    writes = thunk.writes()
    if len(shapes) != len(writes):
        return None
    return ThunkIO(thunk, instr, tuple(zip(shapes, writes, strict=True)))


_CONTROL = (Opcode.WHILE, Opcode.CONDITIONAL, Opcode.CALL)


def _sized(instr, size: int) -> Shape:
    """The instruction's array shape if it is `size` bytes, else raw bytes."""
    if instr is not None and instr.shape.is_array and instr.shape.byte_size == size:
        return instr.shape
    return Shape.array("u8", (size,))
