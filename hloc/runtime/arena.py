"""An arena executor: runs a thunk program with NumPy over memory laid out by the buffer
assignment. It exists to prove the assignment right — every value is read from and written
to its assigned bytes, so any wrong sharing corrupts results.

One zeroed uint8 array per allocation. Inputs are copied into parameter allocations and
constants into theirs; each thunk reads its operands as views of their slices (in the
physical layout the shape's minor_to_major gives), computes with the reference
interpreter's implementation of its instruction, and writes the result into its output
slices. While and conditional thunks run their nested sequences, reading the pred / branch
index from its slice. Results are read from the output slices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..buffers.assignment import Slice
from ..errors import InputError
from ..ir import Instruction, Module, Shape
from ..registry import Registry
from ..thunks.base import Thunk, ThunkKind
from ..thunks.thunks import ThunkProgram
from .interpreter import evaluate_computation, registry, to_value
from .layouts import physical_order


class Arena:
    """The memory: one byte array per allocation."""

    def __init__(self, program: ThunkProgram):
        self.memory = {a.index: np.zeros(a.size, np.uint8) for a in program.allocations}

    def view(self, s: Slice, shape: Shape) -> np.ndarray:
        """A writable view of slice `s` as an array of `shape` in logical index order."""
        raw = self.memory[s.allocation][s.offset:s.offset + s.size]
        if raw.size != shape.byte_size:
            raise InputError(f"slice {s} holds {raw.size} bytes, {shape} needs {shape.byte_size}")
        order = physical_order(shape)
        if order is None:
            return raw.view(shape.np_dtype).reshape(shape.dims)
        phys = raw.view(shape.np_dtype).reshape([shape.dims[d] for d in order])
        return phys.transpose(np.argsort(order))

    def read(self, shape: Shape, slices: list[Slice]):
        """The value of `shape` whose array leaves live at `slices` (consumed in order)."""
        if shape.is_tuple:
            return tuple(self.read(s, slices) for s in shape.tuple_shapes)
        if not shape.is_array:
            return None
        arr = self.view(slices.pop(0), shape)
        arr.flags.writeable = False  # implementations must not write their operands
        return arr

    def write(self, shape: Shape, value, slices: list[Slice]) -> None:
        if shape.is_tuple:
            for s, v in zip(shape.tuple_shapes, value, strict=True):
                self.write(s, v, slices)
            return
        if not shape.is_array:
            return
        np.copyto(self.view(slices.pop(0), shape), np.asarray(value, dtype=shape.np_dtype))


Runner = Callable[["ArenaExecutor", Thunk], None]
RUNNERS: Registry[ThunkKind, Runner] = Registry("arena thunk runner",
                                         modules=("hloc.runtime.arena_collectives",))
_runs = RUNNERS.register


class ArenaExecutor:
    """Executes a ThunkProgram of `module` over an arena."""

    def __init__(self, module: Module, program: ThunkProgram,
                 observer: Callable[[Thunk], None] | None = None):
        self.module = module
        self.program = program
        # Called with every thunk just before it runs (tests use it to audit memory use).
        self.observer = observer
        self.instructions: dict[str, Instruction] = {
            i.name: i for c in module.computations for i in c.instructions}
        self.ctx = registry.Context(evaluate_computation)
        self.arena: Arena | None = None

    def run(self, args: Sequence) -> list[np.ndarray]:
        """Execute on arguments (arrays, one per entry parameter); returns the flat results."""
        entry = self.module.entry
        params = entry.parameters
        if len(args) != len(params):
            raise InputError(f"module {self.module.name} takes {len(params)} arguments, got {len(args)}")
        self.arena = Arena(self.program)
        self._load_inputs([to_value(p.shape, a) for p, a in zip(params, args, strict=True)])
        self.run_sequence(self.program.sequence)
        return [np.array(self.arena.view(s, entry.root.shape.subshape(i)))
                for i, s in self.program.outputs]

    def _load_inputs(self, values: list) -> None:
        entry = self.module.entry
        for number, index, s in self.program.parameters:
            shape = entry.parameter(number).shape.subshape(index)
            value = values[number]
            for i in index:
                value = value[i]
            self.arena.write(shape, value, [s])
        for name, s in self.program.constants:
            instr = self.instructions[name]
            self.arena.write(instr.shape, instr.literal.array, [s])

    def run_sequence(self, thunks) -> None:
        for thunk in thunks:
            if self.observer is not None:
                self.observer(thunk)
            RUNNERS.lookup(thunk.kind)(self, thunk)

    def operand_values(self, instr: Instruction, slices) -> list:
        pending = list(slices)
        return [self.arena.read(op.shape, pending) for op in instr.operands]


@_runs(ThunkKind.KERNEL, ThunkKind.GEMM, ThunkKind.CONVOLUTION, ThunkKind.SORT, ThunkKind.FFT,
       ThunkKind.CUSTOM_CALL)
def _run_instruction(ex: ArenaExecutor, thunk: Thunk) -> None:
    """Every thunk that runs one instruction: the interpreter's implementation of it."""
    instr = ex.instructions[thunk.name]
    operands = ex.operand_values(instr, thunk.reads())
    result = registry.lookup(instr)(ex.ctx, instr, operands)
    # Materialize first: results may be views of operands whose bytes the write overlaps.
    ex.arena.write(instr.shape, _materialize(result), list(thunk.writes()))


def _materialize(value):
    if isinstance(value, tuple):
        return tuple(_materialize(v) for v in value)
    return None if value is None else np.array(value)


@_runs(ThunkKind.COPY)
def _copy(ex: ArenaExecutor, thunk) -> None:
    src, dst = thunk.source, thunk.destination
    data = ex.arena.memory[src.allocation][src.offset:src.offset + src.size].copy()
    ex.arena.memory[dst.allocation][dst.offset:dst.offset + dst.size] = data


@_runs(ThunkKind.MEMSET)
def _memset(ex: ArenaExecutor, thunk) -> None:
    d = thunk.destination
    ex.arena.memory[d.allocation][d.offset:d.offset + d.size] = thunk.byte


def _scalar(ex: ArenaExecutor, s: Slice, shape: Shape):
    return ex.arena.view(s, shape).reshape(()).item()


@_runs(ThunkKind.WHILE)
def _while(ex: ArenaExecutor, thunk) -> None:
    pred = Shape.scalar("pred")
    iterations = 0
    while True:
        ex.run_sequence(thunk.condition)
        if not _scalar(ex, thunk.predicate, pred):
            break
        ex.run_sequence(thunk.body)
        iterations += 1
    if thunk.trip_count is not None and iterations != thunk.trip_count:
        raise RuntimeError(f"while %{thunk.name}: ran {iterations} iterations, "
                           f"its known trip count is {thunk.trip_count}")


@_runs(ThunkKind.CONDITIONAL)
def _conditional(ex: ArenaExecutor, thunk) -> None:
    instr = ex.instructions[thunk.name]
    selector = _scalar(ex, thunk.selector, instr.operands[0].shape)
    ex.run_sequence(thunk.branches[thunk.branch(selector)])


@_runs(ThunkKind.SEQUENTIAL)
def _sequential(ex: ArenaExecutor, thunk) -> None:
    ex.run_sequence(thunk.thunks)


def run_program(module: Module, program: ThunkProgram, args: Sequence,
                observer: Callable[[Thunk], None] | None = None) -> list[np.ndarray]:
    """Run `program` (emitted for `module`) on `args`; the flat list of results."""
    return ArenaExecutor(module, program, observer).run(args)
