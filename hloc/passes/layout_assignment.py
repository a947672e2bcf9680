"""Layout assignment: every array gets a layout; row-major inside, the entry's layouts at the edge.

hloc's backends read and write every buffer row-major, so the pass gives every instruction of
every computation a plain row-major layout (no tiling, whole-byte elements) and moves data at
the edges only: an entry parameter that arrives in another layout is copied to row-major once,
and a result the entry computation layout wants in another layout is copied into it at the
root. Layout-sensitive ops are made layout-free first: a bitcast between non-row-major layouts
becomes the transpose/reshape/transpose it stands for. Custom-calls with operand layout
constraints get their operands copied into the constrained layouts.
"""

from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Attrs, Computation, Instruction, Layout, Module, Opcode, Shape
from ..util.record import dataclass
from .base import Pass, register_pass
from .bitcast_reshapes import permutes_memory

Op = Opcode


def row_major(shape: Shape) -> Shape:
    """`shape` with every array leaf in the plain row-major layout."""
    if shape.is_tuple:
        return Shape.tuple_of(row_major(s) for s in shape.tuple_shapes)
    if not shape.is_array:
        return shape
    return shape.with_layout(Layout.row_major(shape.rank))


def has_layout(shape: Shape) -> bool:
    if shape.is_tuple:
        return all(has_layout(s) for s in shape.tuple_shapes)
    return not shape.is_array or shape.layout is not None


def relayout(comp: Computation, value: Instruction, target: Shape) -> Instruction:
    """`value` in the layout of `target`: itself when equal, else copies of the array leaves."""
    if value.shape == target:
        return value
    if not target.is_tuple:
        return comp.add(Instruction(Op.COPY, target, [value]))
    parts = []
    for k, sub in enumerate(target.tuple_shapes):
        element = value.operands[k] if value.opcode == Op.TUPLE else comp.add(Instruction(
            Op.GET_TUPLE_ELEMENT, value.shape.tuple_shapes[k], [value], attrs=Attrs(tuple_index=k)))
        parts.append(relayout(comp, element, sub))
    return comp.add(Instruction(Op.TUPLE, target, parts))


def _physical_order(shape: Shape) -> tuple[int, ...]:
    """Dimensions from major to minor (no layout reads as row-major)."""
    if shape.layout is None:
        return tuple(range(shape.rank))
    return tuple(reversed(shape.layout.minor_to_major))


def _unbitcast(comp: Computation, bc: Instruction) -> None:
    """Replace a bitcast whose meaning depends on non-row-major layouts by logical ops."""
    src, dst = bc.operands[0].shape, bc.shape
    if src.element_type != dst.element_type:
        raise UnsupportedError(f"bitcast %{bc.name} changes the element type with a "
                               f"non-row-major layout")
    value = bc.operands[0]
    order = _physical_order(src)
    if order != tuple(range(src.rank)):
        value = comp.add(Instruction(Op.TRANSPOSE, src.with_dims([src.dims[d] for d in order]),
                                     [value], attrs=Attrs(dimensions=order)))
    dst_order = _physical_order(dst)
    physical = dst.with_dims([dst.dims[d] for d in dst_order])
    if value.shape.dims != physical.dims:
        value = comp.add(Instruction(Op.RESHAPE, physical, [value]))
    inverse = tuple(dst_order.index(d) for d in range(dst.rank))
    if inverse != tuple(range(dst.rank)):
        value = comp.add(Instruction(Op.TRANSPOSE, dst.with_dims(dst.dims), [value],
                                     attrs=Attrs(dimensions=inverse)))
    comp.replace_instruction(bc, value)


def _needs_unbitcast(instr: Instruction) -> bool:
    shapes = (instr.shape, instr.operands[0].shape)
    return any(s.is_array and s.layout is not None and not s.layout.is_row_major for s in shapes)


@register_pass(aliases=("layout",))
@dataclass
class LayoutAssignment(Pass):
    """Gives every array shape a layout: row-major everywhere, the entry layout at the edges.

    Assumes: a valid module; the entry layout is module.config.entry_layout when set, else
    the layouts the entry parameters and root carry (row-major where they carry none).
    Guarantees: every array shape has a layout, row-major except entry parameters, the values
    feeding the entry root's layout, and custom-call operands with layout constraints; copies
    (layout changes only) are inserted at those edges; the module computes the same values.
    With `honor-entry-layout=false` the entry layout itself becomes row-major.
    """

    name = "layout-assignment"
    honor_entry_layout: bool = True

    def run(self, module: Module) -> bool:
        entry = module.entry
        params_want, result_want = self._entry_layout(module)
        changed = self._remove_layout_bitcasts(module)
        cache: dict[Shape, Shape] = {}
        for comp in module.computations:
            changed |= _assign(comp, cache)
        changed |= self._entry_edges(entry, params_want, result_want)
        for comp in module.computations:
            changed |= _constrain_custom_calls(comp)
        if changed:
            for comp in module.computations:
                comp.instructions[:] = comp.post_order()
        if module.config.entry_layout is not None or not self.honor_entry_layout:
            module.config.entry_layout = (tuple(p.shape for p in entry.parameters),
                                          entry.root.shape)
        return changed

    def _entry_layout(self, module: Module) -> tuple[list[Shape], Shape]:
        entry = module.entry
        params = [p.shape for p in entry.parameters]
        result = entry.root.shape
        if module.config.entry_layout is not None:
            params, result = list(module.config.entry_layout[0]), module.config.entry_layout[1]
        if not self.honor_entry_layout:
            return [row_major(s) for s in params], row_major(result)
        params = [s if has_layout(s) else row_major(s) for s in params]
        return params, result if has_layout(result) else row_major(result)

    @staticmethod
    def _remove_layout_bitcasts(module: Module) -> bool:
        changed = False
        for comp in module.computations:
            for instr in [i for i in comp.instructions if i.opcode == Op.BITCAST]:
                if _needs_unbitcast(instr):
                    _unbitcast(comp, instr)
                    changed = True
        return changed

    @staticmethod
    def _entry_edges(entry: Computation, params_want: list[Shape], result_want: Shape) -> bool:
        changed = False
        for param, want in zip(entry.parameters, params_want, strict=True):
            if want == param.shape:
                continue
            users = list(param.users)
            param.shape = want
            inside = relayout(entry, param, row_major(want))
            for user in users:
                user.replace_operand_with(param, inside)
            changed = True
        root = entry.root
        if root.shape != result_want:
            entry.root = relayout(entry, root, result_want)
            _bitcast_transposed_results(entry)
            changed = True
        return changed


def _bitcast_transposed_results(entry: Computation) -> None:
    """A result copied into the entry layout from a transpose that the layout undoes (jax's
    weight gradient `dot(...)^T` with result layout {0,1}: the transposed copy and the copy
    back would put every element where the dot wrote it) becomes a bitcast of the
    transpose's operand, which then writes the result buffer itself."""
    root = entry.root
    leaves = dict.fromkeys(root.operands) if root.opcode == Op.TUPLE else [root]
    for leaf in leaves:
        if leaf.opcode != Op.COPY or leaf.operands[0].opcode != Op.TRANSPOSE:
            continue
        transpose = leaf.operands[0]
        source = transpose.operands[0]
        tiled = leaf.shape.layout is not None and bool(leaf.shape.layout.tiles)
        if tiled or source.shape.element_type != leaf.shape.element_type or \
                permutes_memory(list(transpose.attrs.dimensions), source.shape, leaf.shape):
            continue
        bitcast = entry.add(Instruction(Op.BITCAST, leaf.shape, [source], name="bitcast",
                                        metadata=transpose.metadata))
        if leaf is root:
            entry.root = bitcast
        else:
            root.replace_operand_with(leaf, bitcast)


def _assign(comp: Computation, cache: dict[Shape, Shape]) -> bool:
    changed = False
    for instr in comp.instructions:
        shape = instr.shape
        want = cache.get(shape)
        if want is None:
            want = cache[shape] = row_major(shape)
        if want != shape:
            instr.shape = want
            changed = True
    return changed


def _constrain_custom_calls(comp: Computation) -> bool:
    """Copies into the operand layouts custom calls ask for, except jax's LAPACK calls: hloc
    copies each of their matrices into LAPACK's column-major scratch from any layout
    (runtime/lapack.py), or solves it in place (codegen/cpu/trsm.py), so the layouts jax asks
    for would only add a transposing copy of each operand."""
    changed = False
    for instr in list(comp.instructions):
        wanted = instr.attrs.operand_layout_constraints if instr.opcode == Op.CUSTOM_CALL else None
        if not wanted or (instr.attrs.custom_call_target or "").startswith("lapack_"):
            continue
        for k, want in enumerate(wanted):
            operand = instr.operands[k]
            if operand.shape != want and has_layout(want):
                instr.replace_operand(k, relayout(comp, operand, want))
                changed = True
    return changed
