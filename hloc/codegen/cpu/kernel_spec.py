"""What the CPU kernel emitter is asked for (KernelSpec) and what it reports (KernelInfo).

Kernel ABI (every kernel): `void NAME(i8** buffers, i64 begin, i64 end)`.
- `buffers[0 .. num_operands)` point at the operands (the computation's parameters in order),
  `buffers[num_operands ..)` at the outputs (the leaves of the root, depth-first).
- Buffers are dense arrays in the layout of their shape; pred and sub-byte integers take one
  byte per element, narrow floats are stored as their bit patterns.
- The kernel computes the work units [begin, end) of `KernelInfo.parallel_extent` units.
  Units are independent: the runtime may call disjoint ranges from different threads, and
  [0, parallel_extent) runs everything. An extent of 0 means there is nothing to do.
- Outputs listed in `aliases` share their buffer with an operand (in-place
  dynamic-update-slice / scatter): the kernel then only writes what changes.
- The kernel sets flush-to-zero / denormals-are-zero for its duration (XLA CPU semantics) and
  restores the caller's floating-point control state before returning.
"""

from __future__ import annotations

from dataclasses import field

from ...ir import Attrs, Computation, Instruction, Opcode, Shape
from ...util.record import dataclass


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: a computation whose parameters are the operands, root leaves the outputs."""

    name: str
    computation: Computation = field(compare=False, repr=False)
    instruction_names: tuple[str, ...]
    operand_shapes: tuple[Shape, ...]
    output_shapes: tuple[Shape, ...]
    # (output index, operand index) pairs whose buffers are the same memory.
    aliases: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def for_computation(comp: Computation, name: str,
                        aliases: tuple[tuple[int, int], ...] = ()) -> KernelSpec:
        """A computation (e.g. the one a Kernel thunk names) with its own parameter and
        root shapes as operand and output shapes."""
        params = comp.parameters
        return KernelSpec(name, comp, (comp.name,), tuple(p.shape for p in params),
                          tuple(s for _, s in comp.root.shape.leaves()), tuple(aliases))

    @staticmethod
    def for_instruction(instr: Instruction, name: str | None = None,
                        aliases: tuple[tuple[int, int], ...] = ()) -> KernelSpec:
        """A fusion's computation, or a single instruction wrapped as a computation."""
        comp = instr.fused_computation() if instr.opcode == Opcode.FUSION else wrap(instr)
        return KernelSpec(
            name=name or kernel_symbol(instr.name),
            computation=comp,
            instruction_names=(instr.name,),
            operand_shapes=tuple(o.shape for o in instr.operands),
            output_shapes=tuple(s for _, s in instr.shape.leaves()),
            aliases=tuple(aliases),
        )


@dataclass(frozen=True)
class KernelInfo:
    """What the runtime needs to call an emitted kernel."""

    name: str
    parallel_extent: int
    num_operands: int
    num_outputs: int
    segments: tuple[str, ...]  # the loop forms used, e.g. ("loop",), ("column-reduce",)
    instruction_names: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"name": self.name, "parallel_extent": self.parallel_extent,
                "num_operands": self.num_operands, "num_outputs": self.num_outputs,
                "segments": list(self.segments),
                "instruction_names": list(self.instruction_names)}


def kernel_symbol(name: str) -> str:
    """A C-identifier-safe symbol for an instruction name."""
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return f"hloc_{safe}"


def wrap(instr: Instruction) -> Computation:
    """A computation computing `instr` from parameters standing for its operands."""
    comp = Computation(f"{instr.name}.kernel", is_fusion=True)
    params = []
    for i, operand in enumerate(instr.operands):
        params.append(comp.add(Instruction(Opcode.PARAMETER, operand.shape, name=f"p{i}",
                                           attrs=Attrs(parameter_number=i))))
    clone = Instruction(instr.opcode, instr.shape, params, name=instr.name, called=instr.called,
                        attrs=instr.attrs)
    comp.add(clone)
    comp.root = clone
    return comp
