"""When an instruction's output may live in the same bytes as one of its operands.

Two different facts:
- *in-place pairs* (`in_place_pairs`): the output must be the operand's buffer —
  dynamic-update-slice and scatter update their operand, fusions whose root is one of those on
  a fusion parameter, and custom-calls with output_to_operand_aliasing. Alias analysis puts
  the two in one HloBuffer; copy insertion makes that legal.
- *shareable operands* (`can_share_operand`): the output may reuse a dying operand's bytes
  because every output element is computed from the operand element at the same physical
  address only (elementwise ops with identical layouts, and loop fusions that are elementwise
  in that operand, possibly through reshapes between row-major shapes, which keep every
  element at its linear position). Buffer assignment uses this to reuse memory.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import Computation, Instruction, Opcode, Shape, ShapeIndex
from ..ir.opcodes import ELEMENTWISE
from ..registry import Registry

# (output index, operand number, operand index)
InPlacePair = tuple[ShapeIndex, int, ShapeIndex]
IN_PLACE: Registry[Opcode, Callable[[Instruction], list[InPlacePair]]] = Registry(
    "in-place rule")
_in_place = IN_PLACE.register


def in_place_pairs(instr: Instruction) -> list[InPlacePair]:
    """The (output index, operand number, operand index) triples that must share storage."""
    fn = IN_PLACE.get(instr.opcode)
    return fn(instr) if fn is not None else []


@_in_place(Opcode.DYNAMIC_UPDATE_SLICE)
def _dus(instr: Instruction) -> list[InPlacePair]:
    return [((), 0, ())]


@_in_place(Opcode.SCATTER)
def _scatter(instr: Instruction) -> list[InPlacePair]:
    if instr.shape.is_tuple:
        return [((i,), i, ()) for i in range(len(instr.shape.tuple_shapes))]
    return [((), 0, ())]


@_in_place(Opcode.CUSTOM_CALL)
def _custom_call(instr: Instruction) -> list[InPlacePair]:
    pairs = instr.attrs.output_operand_aliasing or ()
    return [(tuple(p.output_shape_index), p.operand_index, tuple(p.operand_shape_index))
            for p in pairs]


@_in_place(Opcode.FUSION)
def _fusion(instr: Instruction) -> list[InPlacePair]:
    fused = instr.called[0]
    root = fused.root
    if root.opcode == Opcode.TUPLE:
        outputs = [((i,), op) for i, op in enumerate(root.operands)]
    else:
        outputs = [((), root)]
    pairs = []
    for index, out in outputs:
        param = _updated_parameter(out)
        if param is not None and len(param.users) == 1:
            pairs.append((index, param.attrs.parameter_number, ()))
    return pairs


def _updated_parameter(instr: Instruction) -> Instruction | None:
    """The fusion parameter an in-place root updates (operand 0 of DUS / first of scatter)."""
    if instr.opcode not in (Opcode.DYNAMIC_UPDATE_SLICE, Opcode.SCATTER) or instr.shape.is_tuple:
        return None
    target = instr.operands[0]
    if target.opcode != Opcode.PARAMETER or target.shape != instr.shape:
        return None
    return target


def update_source(update: Instruction) -> Instruction:
    """The instruction whose elements `update` (a dynamic-update-slice's update operand) holds,
    looking through reshapes and bitcasts that keep the element type; `update` itself when
    there are none. Element k in row-major order of one is element k of the other (for
    bitcasts, in layout order), so a kernel can compute both at once."""
    while update.opcode in (Opcode.RESHAPE, Opcode.BITCAST) and \
            update.operands[0].shape.element_type == update.shape.element_type:
        update = update.operands[0]
    return update


def in_place_update(fused: Computation) -> Instruction | None:
    """The one dynamic-update-slice among a fusion's root values that updates a parameter read
    by nothing else (in place: `in_place_pairs`), or None."""
    root = fused.root
    values = root.operands if root.opcode == Opcode.TUPLE else [root]
    updates = [v for v in values if v.opcode == Opcode.DYNAMIC_UPDATE_SLICE]
    if len(updates) != 1:
        return None
    param = _updated_parameter(updates[0])
    return updates[0] if param is not None and len(param.users) == 1 else None


def in_update_pass(value: Instruction, update: Instruction) -> bool:
    """Whether a kernel updating `update` (in_place_update) in place computes root value
    `value` in the same pass over the update's elements, as the back ends do (codegen/roots
    pass_items): an elementwise value with the update's source's dims (update_source). Each
    thread then computes every such value at one index before storing any."""
    source = update_source(update.operands[1])
    return value is source or elementwise_of(value, source.shape)


def elementwise_of(instr: Instruction, shape: Shape) -> bool:
    """An elementwise op (not map) of `shape`'s dims: element i of it reads element i of each
    operand only."""
    return instr.opcode in ELEMENTWISE and instr.opcode != Opcode.MAP and \
        _same_indexing(instr.shape, shape)


def aligned_uses(start: Instruction, shape: Shape, update: Instruction | None = None) -> bool:
    """Whether every instruction using `start`, transitively, reads it at the element of the
    same index only: elementwise ops (not map) of `shape`'s dims, and then a computation's root
    tuple, or `update`'s update operand (through the reshapes to it from its source)."""
    chain: set[int] = set()
    if update is not None:
        link = update.operands[1]
        while link is not update_source(link):
            chain.add(id(link))
            link = link.operands[0]
    closure = _forward_closure(start)
    reached = {id(i) for i in closure}
    for instr in closure[1:]:
        if instr is update:
            if any(id(o) in reached for o in (update.operands[0], *update.operands[2:])):
                return False
        elif instr.opcode == Opcode.TUPLE:
            if instr is not instr.parent.root:
                return False
        elif id(instr) not in chain and not elementwise_of(instr, shape):
            return False
    return True


def _shares_in_update_pass(user: Instruction, number: int, k: int) -> bool:
    """Output `k` of a loop fusion that updates a buffer in place (in_place_update) may
    overwrite operand `number` if the kernel's pass over the update's elements computes it
    (in_update_pass) and reads that operand only at the same index, for that output, other
    values of the pass and the update. An LSTM step's new cell state: computed from the old
    one in the kernel that also writes the new hidden state into the sequence."""
    fused = user.called[0]
    root = fused.root
    if user.attrs.fusion_kind not in (None, "kLoop") or root.opcode != Opcode.TUPLE or \
            any(i.opcode in (Opcode.DOT, Opcode.CONVOLUTION) for i in fused.instructions):
        return False
    update = in_place_update(fused)
    value = root.operands[k]
    if update is None or value is update or not in_update_pass(value, update):
        return False
    params = [p for p in fused.instructions
              if p.opcode == Opcode.PARAMETER and p.attrs.parameter_number == number]
    return len(params) == 1 and aligned_uses(params[0], value.shape, update)


# ---- shareable operands ---------------------------------------------------------------------

def _same_array(a: Shape, b: Shape) -> bool:
    return (a.is_array and b.is_array and a.dims == b.dims and a.layout == b.layout
            and a.byte_size == b.byte_size)


def _same_indexing(a: Shape, b: Shape) -> bool:
    """Element i of one is at the same position as element i of the other (types may differ)."""
    return a.is_array and b.is_array and a.dims == b.dims and (
        a.rank < 2 or a.layout is None or b.layout is None or a.layout == b.layout)


def can_share_operand(user: Instruction, operand_number: int, output_index: ShapeIndex = ()) -> bool:
    """Whether leaf `output_index` of `user`'s output may overwrite operand `operand_number`
    (an array) while `user` reads it."""
    operand = user.operands[operand_number]
    output = user.shape.subshape(output_index) if user.shape.is_tuple else user.shape
    if not _same_array(output, operand.shape):
        # A loop fusion that only reshapes the operand on the way (dims differ) may still
        # keep every element in place; its parameter walk decides.
        return (user.opcode == Opcode.FUSION and not user.shape.is_tuple
                and user.attrs.fusion_kind in (None, "kLoop")
                and _same_linear(output, operand.shape)
                and output.byte_size == operand.shape.byte_size
                and _elementwise_in_parameter(user.called[0], operand_number))
    if user.opcode == Opcode.SORT:
        # A sort permutes each operand into the output of the same position.
        return output_index == ((operand_number,) if user.shape.is_tuple else ())
    if user.shape.is_tuple and user.opcode == Opcode.FUSION and len(output_index) == 1:
        return _shares_in_update_pass(user, operand_number, output_index[0])
    if output_index != () or user.shape.is_tuple:
        return False
    if user.opcode in ELEMENTWISE:
        return user.opcode != Opcode.MAP or not user.dimensions or _full_map(user)
    if user.opcode == Opcode.FUSION and user.attrs.fusion_kind in (None, "kLoop"):
        return _elementwise_in_parameter(user.called[0], operand_number)
    return False


def _linear(shape: Shape) -> bool:
    """A dense row-major array: element k (in row-major order) lies at byte k * element size,
    whatever the dims, so a reshape between two such shapes moves no element."""
    layout = shape.layout
    return shape.is_array and not any(shape.dynamic_dims) and (
        layout is None or (layout.is_row_major and not layout.tiles
                           and not layout.element_size_in_bits))


def _same_linear(a: Shape, b: Shape) -> bool:
    return _linear(a) and _linear(b) and a.num_elements == b.num_elements


def _full_map(user: Instruction) -> bool:
    return tuple(user.dimensions) == tuple(range(user.shape.rank))


def _elementwise_in_parameter(fused: Computation, number: int) -> bool:
    """Every path from fused parameter `number` to the root goes through elementwise ops of the
    root's shape (so element i of the output reads only element i of the parameter), or
    through elementwise ops and reshapes among row-major shapes of the root's element count
    (element k in row-major order then reads only the parameter's element k)."""
    root = fused.root
    if root.opcode == Opcode.TUPLE:
        return False
    params = [p for p in fused.instructions
              if p.opcode == Opcode.PARAMETER and p.attrs.parameter_number == number]
    if len(params) != 1:
        return False
    path = _forward_closure(params[0])
    if root not in path:
        return False
    inner = [i for i in path if i is not params[0]]
    if any(i.opcode not in _LINEAR_OPS and i.opcode not in ELEMENTWISE for i in inner):
        return False
    if any(i.opcode == Opcode.MAP for i in inner):
        return False
    if all(i.opcode in ELEMENTWISE and _same_indexing(i.shape, root.shape) for i in inner):
        return True
    return all(_same_linear(i.shape, root.shape) for i in path)


# Ops that keep every element at its row-major position between row-major shapes.
_LINEAR_OPS = frozenset({Opcode.RESHAPE, Opcode.BITCAST})


def _forward_closure(start: Instruction) -> list[Instruction]:
    """`start` and every instruction that uses it, transitively (in visit order)."""
    stack = [start]
    seen: dict[Instruction, None] = {}  # an insertion-ordered set
    while stack:
        instr = stack.pop()
        if instr in seen:
            continue
        seen[instr] = None
        stack.extend(instr.users)
    return list(seen)
