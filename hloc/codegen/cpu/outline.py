"""Fusions around a dot or convolution: BLAS for the contraction, kernels for the rest.

The elemental emitter can compute a dot inside a fused kernel, but as a naive loop (hundreds
of times slower than BLAS on real sizes). A fusion whose computation contains contractions is
therefore *outlined* into a composite (unless they are all small dots, which the fused kernel
computes itself: thunk_kernels, dot.py): for each contraction,
  - a prologue kernel per operand that is not a fusion parameter (it computes that operand
    into a scratch buffer),
  - the contraction itself, run by the runtime (gemm / convolution) from parameter or scratch
    buffers into a scratch buffer (or straight into the output when it is the root), or by a
    kernel of its own where convolutions get native kernels (small and depthwise ones) and
    for dots no GEMM library computes (integer and mixed-type products),
and then one epilogue kernel: the fused computation with each contraction replaced by a new
parameter that reads its scratch buffer. Where the epilogue only applies elementwise ops to
a lone contraction's result, in the output's shape, layout and element size, and the output
shares no storage with an operand (`into_output`), the contraction writes the output itself
and the epilogue rewrites it in place: no scratch buffer for it.

Buffers are named by references: ("operand", i) the fusion's operand leaf i, ("output", k) its
output leaf k, ("scratch", j) scratch buffer j of the composite.
"""

from __future__ import annotations

from dataclasses import field

from ...ir import Attrs, Computation, Instruction, Layout, Opcode, Shape
from ...ir.computation import dfs_post_order
from ...ir.opcodes import ELEMENTWISE
from ...util.record import dataclass
from .kernel_spec import KernelSpec

CONTRACTIONS = frozenset({Opcode.DOT, Opcode.CONVOLUTION})


@dataclass
class Composite:
    """The outlined form of one fusion thunk."""

    thunk: str
    scratch: list[Shape] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)  # in order; kernels carry their spec
    specs: list[KernelSpec] = field(default_factory=list)

    def new_scratch(self, shape: Shape) -> tuple[str, int]:
        self.scratch.append(shape)
        return ("scratch", len(self.scratch) - 1)


def outline(fusion: Instruction, thunk: str, symbol: str, into_output: bool = False,
            kernels: bool = True) -> Composite | None:
    """The composite for a fusion with contractions, or None (no contraction, or a form
    this outliner does not handle: contractions feeding contractions, tuple parameters).
    `into_output`: the fusion's output may be written before its operands are all read.
    `kernels=False`: the scratch buffers alone, laid out alike, without steps or kernel
    specs (what buffer assignment needs to know, at a fraction of the cost)."""
    comp = fusion.fused_computation()
    contractions = [i for i in comp.post_order() if i.opcode in CONTRACTIONS]
    if not contractions or any(not p.shape.is_array for p in comp.parameters):
        return None
    if any(_reaches(o, contractions) for c in contractions for o in c.operands):
        return None
    composite = Composite(thunk)
    in_place = _in_place_contraction(comp, contractions) if into_output else None
    params = comp.parameters
    refs: dict[int, tuple[str, int]] = {id(p): ("operand", p.attrs.parameter_number)
                                        for p in params}
    for c in contractions:
        operands = [_operand_ref(composite, params, refs, o, f"{symbol}_pro{len(composite.specs)}",
                                 kernels) for o in c.operands]
        out = ("output", 0) if c is comp.root or c is in_place else composite.new_scratch(c.shape)
        refs[id(c)] = out
        if not kernels:
            continue
        if c.opcode == Opcode.CONVOLUTION and _native_convolution(c):
            _kernel_step(composite, c, operands, out, f"{symbol}_conv{len(composite.specs)}")
        elif c.opcode == Opcode.DOT and _native_dot(c):
            _kernel_step(composite, c, operands, out, f"{symbol}_dot{len(composite.specs)}")
        else:
            composite.steps.append(_contraction_step(c, operands, out))
    if kernels and comp.root not in contractions:
        _epilogue(composite, comp, params, contractions, refs, f"{symbol}_epi")
        _mark_convolution_epilogue(composite, comp, contractions)
    return composite


def _in_place_contraction(comp: Computation, contractions: list[Instruction]
                          ) -> Instruction | None:
    """The lone contraction whose result the epilogue reads only through elementwise ops
    ending at the (array) root, stored like the root: it can be built in the output."""
    root = comp.root
    if len(contractions) != 1 or root is contractions[0] or not root.shape.is_array:
        return None
    (c,) = contractions
    if (c.shape.dims != root.shape.dims or c.shape.byte_size != root.shape.byte_size
            or _storage(c.shape) != _storage(root.shape)):
        return None
    users: dict[int, list[Instruction]] = {}
    for i in comp.instructions:
        for o in i.operands:
            users.setdefault(id(o), []).append(i)
    stack, seen = [c], {id(c)}
    while stack:
        for u in users.get(id(stack.pop()), ()):
            if (u.opcode not in ELEMENTWISE or u.opcode == Opcode.MAP
                    or u.shape.dims != root.shape.dims):
                return None
            if id(u) not in seen:
                seen.add(id(u))
                stack.append(u)
    return c if id(root) in seen else None


def _storage(shape: Shape) -> tuple:
    """How an array's elements are laid out in memory (None: row major)."""
    layout = shape.layout or Layout.row_major(len(shape.dims))
    return layout.minor_to_major, layout.tiles, layout.element_size_in_bits


def _mark_convolution_epilogue(composite: Composite, comp: Computation, contractions) -> None:
    """Record on a lone convolution step the epilogue ops its kernel may apply instead of
    the epilogue kernel step (conv_epilogue.py); the runtime picks either form."""
    from .conv_epilogue import convolution_epilogue

    steps = composite.steps
    if len(contractions) != 1 or len(steps) != 2 or steps[0]["kind"] != "convolution":
        return
    ops = convolution_epilogue(comp, contractions[0])
    if ops:
        steps[0]["epilogue"] = {"ops": ops, "output": ["output", 0], "replaces": 1}


def _native_convolution(c: Instruction) -> bool:
    """Whether this convolution gets a native kernel (codegen/cpu/conv.py: small ones and
    depthwise ones) rather than the runtime's BLAS paths."""
    from .conv import wants_native  # (conv.py builds on thunk_kernels, which imports this)

    return wants_native(c)


def _native_dot(c: Instruction) -> bool:
    """Whether this dot is a tiled kernel of its own rather than the runtime's GEMM: one no
    GEMM library computes (integer or mixed types other than int8 into int32), whose other
    path would be the reference interpreter."""
    from .dot import library_dot, tiled

    return tiled(c) and not library_dot(c)


def _kernel_step(composite: Composite, c: Instruction, operands, out, symbol: str) -> None:
    """A kernel computing contraction `c` alone, from its operands' buffers into `out`."""
    comp = Computation(f"{symbol}.computation", is_fusion=True)
    params = [comp.add(Instruction(Opcode.PARAMETER, o.shape, name=f"{symbol}.p{k}",
                                   attrs=Attrs(parameter_number=k)))
              for k, o in enumerate(c.operands)]
    comp.root = comp.add(Instruction(c.opcode, c.shape, params, name=c.name, called=c.called,
                                     attrs=c.attrs))
    composite.specs.append(KernelSpec.for_computation(comp, symbol))
    buffers = [list(ref) for ref in operands] + [list(out)]
    composite.steps.append({"kind": "kernel", "symbol": symbol, "buffers": buffers})


def _contraction_step(c: Instruction, operands, out) -> dict:
    if c.opcode == Opcode.DOT:
        return {"kind": "gemm", "instruction": c.name, "lhs": list(operands[0]),
                "rhs": list(operands[1]), "output": list(out)}
    return {"kind": "convolution", "instruction": c.name, "input": list(operands[0]),
            "kernel": list(operands[1]), "output": list(out)}


def _reaches(instr: Instruction, targets: list[Instruction]) -> bool:
    """Whether `instr` is or depends on one of `targets`."""
    wanted = {id(t) for t in targets}
    stack, seen = [instr], set()
    while stack:
        i = stack.pop()
        if id(i) in wanted:
            return True
        if id(i) not in seen:
            seen.add(id(i))
            stack.extend(i.operands)
    return False


def _operand_ref(composite: Composite, params, refs, operand: Instruction, symbol: str,
                 kernels: bool = True):
    if id(operand) in refs:
        return refs[id(operand)]
    # A computed operand: a prologue kernel writes it to scratch.
    out = refs[id(operand)] = composite.new_scratch(operand.shape)
    if not kernels:
        return out
    sub = _clone(f"{symbol}.computation", params, operand, {})
    spec = KernelSpec.for_computation(sub, symbol)
    buffers = [["operand", p.attrs.parameter_number] for p in params] + [list(out)]
    composite.specs.append(spec)
    composite.steps.append({"kind": "kernel", "symbol": symbol, "buffers": buffers})
    return out


def _epilogue(composite: Composite, comp: Computation, params, contractions, refs, symbol):
    stand_ins = {}
    buffers = [["operand", p.attrs.parameter_number] for p in params]
    for k, c in enumerate(contractions):
        stand_ins[id(c)] = (len(params) + k, c.shape)
        buffers.append(list(refs[id(c)]))
    outputs = sum(1 for _ in comp.root.shape.leaves())
    buffers += [["output", k] for k in range(outputs)]
    sub = _clone(f"{symbol}.computation", params, comp.root, stand_ins)
    composite.specs.append(KernelSpec.for_computation(sub, symbol))
    composite.steps.append({"kind": "kernel", "symbol": symbol, "buffers": buffers})


def _clone(name: str, params, root: Instruction, stand_ins: dict) -> Computation:
    """A computation computing `root` from parameters like `params` (same numbers), where
    instructions in `stand_ins` (id -> (parameter number, shape)) become parameters too."""
    comp = Computation(name, is_fusion=True)
    mapped: dict[int, Instruction] = {}
    for p in params:
        mapped[id(p)] = comp.add(Instruction(Opcode.PARAMETER, p.shape, name=f"{name}.p{p.attrs.parameter_number}",
                                             attrs=Attrs(parameter_number=p.attrs.parameter_number)))
    for key, (number, shape) in sorted(stand_ins.items(), key=lambda kv: kv[1][0]):
        mapped[key] = comp.add(Instruction(Opcode.PARAMETER, shape, name=f"{name}.p{number}",
                                           attrs=Attrs(parameter_number=number)))
    for instr in _post_order(root, mapped):
        clone = Instruction(instr.opcode, instr.shape, [mapped[id(o)] for o in instr.operands],
                            name=instr.name, called=instr.called, attrs=instr.attrs)
        mapped[id(instr)] = comp.add(clone)
    comp.root = mapped[id(root)]
    return comp


def _post_order(root: Instruction, done: dict) -> list[Instruction]:
    """The instructions `root` needs that are not in `done` yet, operands first."""
    return dfs_post_order([root], lambda i: i.operands, set(done))
