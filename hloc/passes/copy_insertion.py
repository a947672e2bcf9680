"""Copy insertion: add the copies (and control edges) that make buffer sharing legal."""

from __future__ import annotations

from ..analysis.call_graph import flatten_call_graph, while_body
from ..analysis.dataflow import Dataflow, HloValue, leaves, subtree
from ..analysis.sharing import can_share_operand, in_place_pairs
from ..analysis.storage import (
    DependencyOrder,
    closure,
    is_pass_through,
    is_read_only,
    is_read_only_storage,
    storage_root,
)
from ..ir import Attrs, Computation, Instruction, Module, Opcode
from ..util.record import dataclass
from .base import Pass, register_pass


@register_pass
@dataclass
class CopyInsertion(Pass):
    """Adds copies so that the storage sharing of alias analysis is legal.

    Alias analysis makes a while's init, parameters, body root and result one buffer per
    element, a conditional's branch roots and result one buffer, an in-place op's output and
    updated operand one buffer, and an input_output_alias output the parameter's buffer. This
    pass guarantees that in each such buffer no value is overwritten while still needed:
    - while init elements that are constants or entry parameters (unless the body passes them
      through unchanged: then nobody writes them), that are defined outside the while's
      computation, live out, repeated, or read by something that depends on the loop are
      copied; other readers of an uncopied element get control edges to run before the loop;
    - branch root elements not created inside the branch (parameters, constants, outer
      values) or repeated are copied;
    - an in-place op's operand is copied when its storage is read-only, comes from outside the
      computation, is live out of it, or is read by an op that depends on the in-place op;
      otherwise the other readers get control edges to run first;
    - body root elements that are not pass-through must be created in the body (or updated in
      place from the same slot), and every read of the slot's old value is ordered before the
      write; otherwise they are copied, with the copy ordered after those reads;
    - entry root elements stored in a constant or an entry parameter (unless aliased to it by
      input_output_alias) or repeated are copied.
    Sequential computations called from several places are cloned first (one call site each).
    Assumes a valid module; idempotent.
    """

    name = "copy-insertion"

    def run(self, module: Module) -> bool:
        return insert_copies(module)[0]


def insert_copies(module: Module) -> tuple[bool, Dataflow]:
    """Run copy insertion; returns (changed, the dataflow of the resulting module)."""
    changed = flatten_call_graph(module)
    ctx = _Context(module)
    opcodes = {i.opcode for c in ctx.graph.sequential for i in c.instructions}
    if Opcode.WHILE in opcodes:
        # A copy for an outer loop's init can change what an inner loop's init needs: repeat.
        while _while_inits(ctx):
            changed, ctx = True, _Context(module)
    phases = [_in_place_operands, _entry_root_structural]
    if Opcode.CONDITIONAL in opcodes:
        phases.insert(0, _branch_roots)
    if Opcode.WHILE in opcodes:
        phases.insert(-1, _body_roots_structural)
    if Opcode.WHILE in opcodes or module.input_output_alias:
        phases.append(_order_fresh_writes)
    for phase in phases:
        size = module.instruction_count()
        changed |= phase(ctx)
        if module.instruction_count() != size:  # copies were added: recompute the dataflow
            ctx = _Context(module)
    return changed, ctx.df


class _Context:
    """A fresh dataflow of the module plus helpers shared by the phases."""

    def __init__(self, module: Module):
        self.module = module
        self.df = Dataflow(module)
        self.graph = self.df.call_graph
        self._closures: dict[Computation, frozenset[Computation]] = {}
        self._orders: dict[Computation, DependencyOrder] = {}
        self._by_root: dict[int, list[HloValue]] | None = None

    def inside(self, value: HloValue, comp: Computation) -> bool:
        if comp not in self._closures:
            self._closures[comp] = closure(comp)
        return value.instruction.parent in self._closures[comp]

    def order(self, comp: Computation) -> DependencyOrder:
        if comp not in self._orders:
            self._orders[comp] = DependencyOrder(comp)
        return self._orders[comp]

    def sharing(self, root: HloValue) -> list[HloValue]:
        """Every value whose storage root is `root` (all will share its storage)."""
        if self._by_root is None:
            self._by_root = {}
            for v in self.df.values:
                self._by_root.setdefault(storage_root(self.df, v).id, []).append(v)
        return self._by_root.get(root.id, [])

    def readers_in(self, value: HloValue, comp: Computation) -> list[Instruction]:
        return [r for r in value.readers() if r.parent is comp]

    def fresh_in(self, value: HloValue, comp: Computation) -> bool:
        """Storage created inside comp by something that may be written."""
        root = storage_root(self.df, value)
        return (self.inside(root, comp) and not is_read_only(root)
                and root.instruction.opcode != Opcode.PARAMETER)


# ---- rebuilding tuples with copied leaves ---------------------------------------------------

def copy_leaves(comp: Computation, instr: Instruction, indices, prefix=()
                ) -> tuple[Instruction, dict]:
    """An instruction equal to `instr` with copies at leaf `indices`; also {index: copy}."""
    wanted = [i for i in indices if i[:len(prefix)] == prefix]
    if not wanted:
        return instr, {}
    if not instr.shape.is_tuple:
        c = comp.create(Opcode.COPY, instr.shape, [instr])
        return c, {prefix: c}
    elements, copies = [], {}
    for i, shape in enumerate(instr.shape.tuple_shapes):
        if instr.opcode == Opcode.TUPLE:
            sub = instr.operands[i]
        else:
            sub = comp.create(Opcode.GET_TUPLE_ELEMENT, shape, [instr], attrs=Attrs(tuple_index=i))
        new, more = copy_leaves(comp, sub, wanted, prefix + (i,))
        elements.append(new)
        copies.update(more)
    return comp.create(Opcode.TUPLE, instr.shape, elements), copies


def _copy_root(comp: Computation, indices) -> dict:
    if not indices:
        return {}
    new, copies = copy_leaves(comp, comp.root, indices)
    comp.root = new
    return copies


def _repeated(positions: list[tuple[tuple, HloValue]], key) -> set:
    """Indices whose key (value or storage) already appeared at an earlier position."""
    seen, out = set(), set()
    for index, value in positions:
        k = key(value)
        if k in seen:
            out.add(index)
        seen.add(k)
    return out


# ---- phases -------------------------------------------------------------------------------

def _while_inits(ctx: _Context) -> bool:
    # Decide everything on the unchanged module, then rewrite.
    todo = []
    for comp in ctx.graph.sequential:
        for instr in [i for i in comp.instructions if i.opcode == Opcode.WHILE]:
            positions = list(leaves(ctx.df.tree(instr.operands[0])))
            indices = _repeated(positions, id)
            for index, value in positions:
                if _init_needs_copy(ctx, instr, index, value):
                    indices.add(index)
            if indices:
                todo.append((comp, instr, sorted(indices)))
    for comp, instr, indices in todo:
        new, _ = copy_leaves(comp, instr.operands[0], indices)
        instr.replace_operand(0, new)
    return bool(todo)


def _init_needs_copy(ctx: _Context, loop: Instruction, index, value: HloValue) -> bool:
    if is_read_only_storage(ctx.df, value):
        return not is_pass_through(ctx.df, loop, index)
    if is_read_only(storage_root(ctx.df, value)):
        return True
    if not ctx.inside(value, loop.parent) or value.root_of:
        return True
    # The loop takes the value's storage over: everything else reading it must run first.
    others = [r for r in ctx.readers_in(value, loop.parent) if r is not loop]
    order = ctx.order(loop.parent)
    if any(order.reaches(loop, r) for r in others):
        return True
    for r in others:
        order.add_edge(r, loop)
    return False


def _branch_roots(ctx: _Context) -> bool:
    changed = False
    for comp in ctx.graph.sequential:
        if ctx.graph.caller_kind(comp) != "branch":
            continue
        positions = list(leaves(ctx.df.tree(comp.root)))
        indices = _repeated(positions, lambda v: storage_root(ctx.df, v).id)
        indices |= {i for i, v in positions if not ctx.fresh_in(v, comp)}
        changed |= bool(_copy_root(comp, sorted(indices)))
    return changed


def _in_place_operands(ctx: _Context) -> bool:
    changed = False
    copies = []
    for comp in ctx.graph.sequential:
        for instr in comp.instructions:
            for _, k, op_index in in_place_pairs(instr):
                value = subtree(ctx.df.tree(instr.operands[k]), op_index)
                if not isinstance(value, HloValue):
                    continue
                if _needs_operand_copy(ctx, comp, instr, k, op_index, value):
                    copies.append((comp, instr, k, op_index))
                else:
                    for r in ctx.readers_in(value, comp):
                        if r is not instr:
                            changed |= ctx.order(comp).add_edge(r, instr)
    for comp, writer, k, op_index in copies:
        new, _ = copy_leaves(comp, writer.operands[k], [op_index])
        writer.replace_operand(k, new)
    return changed or bool(copies)


def _needs_operand_copy(ctx: _Context, comp, writer, k, op_index, value) -> bool:
    readers = [r for r in ctx.readers_in(value, comp) if r is not writer]
    order = ctx.order(comp)
    return (is_read_only(storage_root(ctx.df, value)) or not ctx.inside(value, comp)
            or bool(value.root_of) or _reads_elsewhere(writer, value, k, op_index, ctx.df)
            or any(order.reaches(writer, r) for r in readers))


def _reads_elsewhere(writer, value, k, op_index, df) -> bool:
    for j, op in enumerate(writer.operands):
        for index, v in leaves(df.tree(op)):
            if v is value and (j, index) != (k, op_index):
                return True
    return False


def _body_roots_structural(ctx: _Context) -> bool:
    changed = False
    for comp in ctx.graph.sequential:
        if ctx.graph.caller_kind(comp) != "while-body":
            continue
        loop = ctx.graph.call_site[comp]
        param = ctx.df.tree(comp.parameter(0))
        positions = [(i, v) for i, v in leaves(ctx.df.tree(comp.root))
                     if not is_pass_through(ctx.df, loop, i)]
        indices = _repeated(positions, lambda v: storage_root(ctx.df, v).id)
        for index, value in positions:
            slot_root = storage_root(ctx.df, subtree(param, index))
            if storage_root(ctx.df, value) is not slot_root and not ctx.fresh_in(value, comp):
                indices.add(index)
        changed |= bool(_copy_root(comp, sorted(indices)))
    return changed


def _entry_root_structural(ctx: _Context) -> bool:
    entry = ctx.module.entry
    aliased = {a.output_index for a in ctx.module.input_output_alias}
    positions = list(leaves(ctx.df.tree(entry.root)))
    indices = _repeated(positions, lambda v: storage_root(ctx.df, v).id)
    for index, value in positions:
        root = storage_root(ctx.df, value)
        if index in aliased:
            if root is not _aliased_param(ctx, index) and not ctx.fresh_in(value, entry):
                indices.add(index)
        elif is_read_only(root):
            indices.add(index)
    return bool(_copy_root(entry, sorted(indices)))


def _aliased_param(ctx: _Context, output_index) -> HloValue | None:
    entry = ctx.module.entry
    for a in ctx.module.input_output_alias:
        if a.output_index == output_index:
            return subtree(ctx.df.tree(entry.parameter(a.parameter_number)), a.parameter_index)
    return None


def _order_fresh_writes(ctx: _Context) -> bool:
    """Order every read of the values a new value overwrites (a while slot's parameter or a
    donated entry parameter, and everything already sharing that storage: in-place updates,
    inner loops that carry it) before the instruction that creates the new value; copy the
    new value where that is impossible."""
    changed = False
    for comp, old, index, value in _fresh_writes(ctx):
        olds = ctx.sharing(storage_root(ctx.df, old))
        new = storage_root(ctx.df, value)
        writer = new.instruction
        readers = list(dict.fromkeys(r for old in olds for r in ctx.readers_in(old, comp)
                                     if r is not writer))
        order = ctx.order(comp)
        legal = (writer.parent is comp and all(not order.reaches(writer, r) for r in readers)
                 and all(_shares_legally(ctx.df, new, old) for old in olds))
        if legal:
            for r in readers:
                changed |= order.add_edge(r, writer)
            continue
        (copy,) = _copy_root(comp, [index]).values()
        for r in readers:
            order.add_edge(r, copy)
        changed = True
    return changed


def _fresh_writes(ctx: _Context):
    """(computation, old values, root index, new value) for root leaves written into the
    storage of other values: non-pass-through body slots not updated in place, and donated
    outputs. Collected before any change, in a deterministic order."""
    out = []
    for comp in ctx.graph.sequential:
        if ctx.graph.caller_kind(comp) != "while-body":
            continue
        loop = ctx.graph.call_site[comp]
        param = ctx.df.tree(comp.parameter(0))
        for index, value in leaves(ctx.df.tree(comp.root)):
            old = subtree(param, index)
            if value is not old and storage_root(ctx.df, value) is not storage_root(ctx.df, old) \
                    and not is_pass_through(ctx.df, loop, index):
                out.append((comp, old, index, value))
    entry = ctx.module.entry
    for index, value in leaves(ctx.df.tree(entry.root)):
        old = _aliased_param(ctx, index)
        if old is not None and storage_root(ctx.df, value) is not old:
            out.append((entry, old, index, value))
    return out


def _shares_legally(df: Dataflow, new: HloValue, old: HloValue) -> bool:
    """A writer that reads the old value itself must be able to overwrite it as it goes."""
    writer = new.instruction
    for k, op in enumerate(writer.operands):
        if any(v is old for _, v in leaves(df.tree(op))):
            if writer.opcode in (Opcode.WHILE, Opcode.CONDITIONAL, Opcode.CALL):
                return False
            if not can_share_operand(writer, k, new.index):
                return False
    return True


# `while_body` is re-exported for tests that build loops by hand.
__all__ = ["CopyInsertion", "copy_leaves", "insert_copies", "while_body"]
