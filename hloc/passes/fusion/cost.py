"""The fusion cost model: which ops may be fused, which are expensive, which reuse elements.

Fusion evaluates a fused producer once per element its consumer reads, so the questions the
fusion passes ask are:
  * can the producer be expressed inside a kernel at all (`producer_class`)?
  * does recomputing it cost much (`is_expensive`)? Expensive producers are never duplicated
    (fused into one consumer while the original stays for others) and never fused below an op
    that reads each operand element several times (`reuses_operand`).
  * is an instruction a kernel at all (`is_trivial`)? Used for kernel counts in reports.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...ir import Computation, Instruction, Module, Opcode
from ...ir.opcodes import ELEMENTWISE, SIDE_EFFECTING, TRANSCENDENTAL

Op = Opcode

# Elementwise ops whose per-element cost is a libm call or a long instruction sequence.
EXPENSIVE_ELEMENTWISE = TRANSCENDENTAL | {Op.DIVIDE, Op.REMAINDER, Op.RSQRT, Op.SQRT}
# Non-elementwise ops that do real work per output element.
EXPENSIVE_OTHER = frozenset({
    Op.REDUCE, Op.REDUCE_WINDOW, Op.DOT, Op.CONVOLUTION, Op.FFT, Op.SORT, Op.MAP,
    Op.TRIANGULAR_SOLVE, Op.CHOLESKY, Op.SCATTER, Op.SELECT_AND_SCATTER,
})

# Ops that only move or index data: fused, they cost an index computation.
INDEX_OPS = frozenset({
    Op.BROADCAST, Op.RESHAPE, Op.TRANSPOSE, Op.SLICE, Op.PAD, Op.CONCATENATE, Op.IOTA,
    Op.REVERSE, Op.DYNAMIC_SLICE, Op.GATHER,
})
# Elementwise ops that cannot live in a loop kernel (state, host interaction) or that we keep
# out on purpose (map calls a computation per element; rng has hidden state).
_NOT_FUSIBLE_ELEMENTWISE = frozenset({Op.MAP, Op.RNG, Op.STOCHASTIC_CONVERT})

# Top-level instructions that are not kernels: no code runs for them.
TRIVIAL = frozenset({
    Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.BITCAST, Op.AFTER_ALL,
    Op.OPT_BARRIER, Op.PARTITION_ID, Op.REPLICA_ID, Op.ADD_DEPENDENCY, Op.WHILE,
    Op.CONDITIONAL, Op.CALL, Op.DOMAIN,
})

# Called computations that are whole programs (fusion runs inside them), per opcode.
_CONTROL_FLOW = frozenset({Op.WHILE, Op.CONDITIONAL, Op.CALL, Op.ASYNC_START})


def is_expensive(instr: Instruction) -> bool:
    """Recomputing the instruction per use costs much more than reading its result."""
    if instr.opcode in EXPENSIVE_ELEMENTWISE:
        # Integer division is a few cycles; float transcendental ops are not.
        return instr.opcode not in (Op.DIVIDE, Op.REMAINDER) or not instr.shape.dtype.is_integral
    return instr.opcode in EXPENSIVE_OTHER


def producer_class(instr: Instruction) -> str | None:
    """How `instr` may be fused into a consumer: 'elementwise', 'index', 'constant', 'reduce',
    'contraction' (dot/convolution, output fusion only), or None when it never fuses."""
    if not instr.shape.is_array or instr.control_predecessors or instr.control_successors:
        return None
    if instr.opcode in SIDE_EFFECTING:
        return None
    op = instr.opcode
    if op == Op.CONSTANT:
        # Array constants stay buffers of their own: fusing them only copies data into kernels.
        return "constant" if instr.shape.num_elements <= 1 else None
    if op == Op.COPY and _changes_layout(instr):
        return None  # a transposing copy is its own kernel: only it must know both layouts
    if op in ELEMENTWISE and op not in _NOT_FUSIBLE_ELEMENTWISE:
        return "elementwise"
    if op in INDEX_OPS:
        return "index"
    if op == Op.REDUCE and not instr.shape.is_tuple:
        return "reduce"
    if op in (Op.DOT, Op.CONVOLUTION):
        return "contraction"
    return None


def _changes_layout(copy: Instruction) -> bool:
    source = copy.operands[0].shape
    return source.layout is not None and copy.shape.layout is not None \
        and source.layout != copy.shape.layout


def can_root_fusion(instr: Instruction) -> bool:
    """Whether `instr` may be the root of a new fusion (its producers are fused into it)."""
    if instr.control_predecessors or instr.control_successors:
        return False
    if instr.opcode == Op.REDUCE:
        return True  # variadic reduces (argmax) give multi-output input fusions
    if instr.opcode == Op.REDUCE_WINDOW:
        return instr.shape.is_array
    if instr.opcode == Op.DYNAMIC_UPDATE_SLICE:
        # Its update's producers join; operand 0 stays the buffer updated in place.
        return instr.shape.is_array and instr.operands[0].shape.layout == instr.shape.layout
    return producer_class(instr) in ("elementwise", "index") and instr.opcode != Op.IOTA


def reuses_operand(user: Instruction, operand_index: int) -> bool:
    """`user` reads some element of operand `operand_index` more than once."""
    op = user.opcode
    operand = user.operands[operand_index]
    if op in ELEMENTWISE or op == Op.BROADCAST:
        # Elementwise ops may take scalar operands (clamp bounds): read once per element.
        return user.shape.num_elements > operand.shape.num_elements
    if op == Op.REDUCE_WINDOW:
        return any(d.size > d.stride for d in user.attrs.window.dims)
    if op in (Op.GATHER, Op.DOT, Op.CONVOLUTION):
        return True
    if op == Op.PAD:
        return operand_index == 1 and user.shape.num_elements > 1
    if op == Op.REDUCE:
        # The init value is read once per output element.
        return operand_index >= len(user.operands) // 2
    if op == Op.DYNAMIC_SLICE:
        return operand_index > 0 and user.shape.num_elements > 1
    if op == Op.DYNAMIC_UPDATE_SLICE:
        # Each update element is read once; every start index by every element.
        return operand_index > 1 and user.operands[1].shape.num_elements > 1
    return False


def updated_in_place(user: Instruction, operand_index: int) -> bool:
    """Operand `operand_index` of `user` is the buffer `user` updates in place (a
    dynamic-update-slice's operand 0): it stays a buffer, never fused into the user's kernel."""
    return user.opcode == Op.DYNAMIC_UPDATE_SLICE and operand_index == 0


def identity_indexed(user: Instruction) -> bool:
    """Every operand element i is read exactly at output element i (same dims, elementwise)."""
    return user.opcode in ELEMENTWISE and all(o.shape.dims == user.shape.dims
                                              for o in user.operands)


SEARCH_BUDGET = 2000


def depends_on(value: Instruction, early: Instruction, skip=None) -> bool:
    """Whether `value` depends on `early` through operands or control edges (conservatively
    True once the search passes SEARCH_BUDGET instructions). `skip(instr)`, when given, prunes
    instructions known not to reach `early`."""
    stack, seen = [value], set()
    while stack:
        cur = stack.pop()
        if cur is early:
            return True
        if id(cur) in seen or (skip is not None and skip(cur)):
            continue
        seen.add(id(cur))
        if len(seen) > SEARCH_BUDGET:
            return True
        stack.extend(cur.operands)
        stack.extend(cur.control_predecessors)
    return False


# ---- where fusion runs, and what counts as a kernel -------------------------------------------
def program_computations(module: Module) -> list[Computation]:
    """The entry and every computation reached through control flow (while, conditional, call):
    the computations whose instructions are kernels. Reducers, comparators and fused
    computations are not among them."""
    out: list[Computation] = []
    seen: set[int] = set()
    stack = [module.entry] if module.entry is not None else []
    while stack:
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        out.append(comp)
        for instr in comp.instructions:
            if instr.opcode in _CONTROL_FLOW:
                stack.extend(instr.called)
    return out


def _top_level(module: Module) -> Iterator[Instruction]:
    for comp in program_computations(module):
        yield from comp.instructions


def is_trivial(instr: Instruction) -> bool:
    """No kernel runs for the instruction (parameters, constants, tuples, control flow, ...)."""
    return instr.opcode in TRIVIAL


def fusion_count(module: Module) -> int:
    """Fusion instructions in program computations (while bodies and branches included)."""
    return sum(1 for i in _top_level(module) if i.opcode == Op.FUSION)


def kernel_count(module: Module) -> int:
    """Non-trivial instructions in program computations: the kernels (and library calls) a
    backend launches for one run, loop bodies counted once."""
    return sum(1 for i in _top_level(module) if not is_trivial(i))
