"""HLO text printer: XLA's long form (what `compile().as_text()` and XLA dumps show).

Every attribute is printed in XLA's spelling and order: opcode-specific attributes first
(hlo_instructions.cc), then called computations, sharding, frontend attributes,
control-predecessors, metadata and backend_config. The output parses back with
hloc.ir.text.parser to a module that prints identically.
"""

from __future__ import annotations

from ...util.record import dataclass
from ..computation import Computation, dfs_post_order
from ..instruction import Instruction
from ..module import Module
from ..opcodes import Opcode
from ..shape import Shape
from .lexer import c_escape, lexes_as_json_dict
from .literal_text import format_literal
from .printer_attrs import (
    ATTR_PRINTERS,
    CALLED_PRINTERS,
    default_comparison_type,
    format_frontend_attributes,
    shape_text,
)

__all__ = ["PrintOptions", "print_module", "print_computation", "print_instruction",
           "shape_text", "default_comparison_type"]


@dataclass(frozen=True)
class PrintOptions:
    """Knobs of the printer; the defaults give parseable text with everything in it."""

    print_ids: bool = False  # append `/*id=N*/` after each instruction (a comment: still parses)
    print_metadata: bool = True
    print_large_constants: bool = True  # False: constants over 10 elements print as {...}
    print_backend_config: bool = True


def print_module(module: Module, *, print_ids: bool = False, print_metadata: bool = True,
                 print_large_constants: bool = True) -> str:
    """The whole module as HLO text (header, then computations callees first)."""
    opts = PrintOptions(print_ids, print_metadata, print_large_constants)
    parts = [_header(module), "\n\n"]
    for comp in _computation_order(module):
        parts.append(_computation_text(comp, opts, comp is module.entry, _order_of(module, comp)))
        parts.append("\n\n")
    return "".join(parts)


def print_computation(comp: Computation, *, print_ids: bool = False,
                      print_metadata: bool = True, print_large_constants: bool = True) -> str:
    """One computation (`[ENTRY ]%name (params) -> shape { ... }`) without a trailing newline."""
    opts = PrintOptions(print_ids, print_metadata, print_large_constants)
    module = comp.parent
    is_entry = module is not None and module.entry is comp
    order = _order_of(module, comp) if module is not None else None
    return _computation_text(comp, opts, is_entry, order)


def print_instruction(instr: Instruction, *, print_ids: bool = False,
                      print_metadata: bool = True, print_large_constants: bool = True) -> str:
    """One instruction line without indentation or the ROOT marker."""
    return _instruction_text(instr, PrintOptions(print_ids, print_metadata, print_large_constants))


# ---- module -------------------------------------------------------------------------------
def _header(module: Module) -> str:
    parts = [f"HloModule {module.name}"]
    if module.schedule is not None:
        parts.append("is_scheduled=true")
    if module.input_output_alias:
        entries = sorted(module.input_output_alias, key=lambda a: a.output_index)
        parts.append("input_output_alias={ " + ", ".join(
            f"{_index(a.output_index)}: ({a.parameter_number}, {_index(a.parameter_index)}, "
            f"{'must-alias' if a.kind == 2 else 'may-alias'})" for a in entries) + " }")
    if module.buffer_donors:
        donors = sorted(module.buffer_donors, key=lambda d: (d.parameter_number, d.parameter_index))
        parts.append("buffer_donor={ " + ", ".join(
            f"({d.parameter_number}, {_index(d.parameter_index)})" for d in donors) + " }")
    layout = _entry_layout(module)
    if layout is not None:
        params, result = layout
        parts.append("entry_computation_layout={" + shape_text(Shape.tuple_of(params))
                     + "->" + shape_text(result) + "}")
    if module.config.replica_count != 1:
        parts.append(f"replica_count={module.config.replica_count}")
    if module.config.num_partitions != 1:
        parts.append(f"num_partitions={module.config.num_partitions}")
    if module.frontend_attributes:
        parts.append("frontend_attributes=" + format_frontend_attributes(module.frontend_attributes))
    return ", ".join(parts)


def _index(index: tuple[int, ...]) -> str:
    return "{" + ",".join(str(i) for i in index) + "}"


def _entry_layout(module: Module):
    if module.config.entry_layout is not None:
        return module.config.entry_layout
    entry = module.entry
    if entry is None or entry.root is None:
        return None
    return tuple(p.shape for p in entry.parameters), entry.root.shape


def _computation_order(module: Module) -> list[Computation]:
    """Callees before callers, visiting computations in module order (depth first).

    For a module parsed from XLA text this reproduces the text's order exactly; a module read
    from a proto keeps the proto's (also callee-first) order instead.
    """
    return dfs_post_order(module.computations, lambda c: c.called_computations())


def _order_of(module: Module | None, comp: Computation) -> list[Instruction]:
    """Schedule order when the module is scheduled, else operands-before-users."""
    post = comp.post_order()
    if module is None or module.schedule is None or comp.name not in module.schedule:
        return post
    by_name = {i.name: i for i in comp.instructions}
    order = [by_name[n] for n in module.schedule[comp.name] if n in by_name]
    listed = {id(i) for i in order}
    return order + [i for i in post if id(i) not in listed]


# ---- computations -------------------------------------------------------------------------
def _computation_text(comp: Computation, opts: PrintOptions, is_entry: bool,
                      order: list[Instruction] | None) -> str:
    params = ", ".join(f"{p.name}: {shape_text(p.shape, False)}" for p in comp.parameters)
    result = shape_text(comp.root.shape, False) if comp.root is not None else "()"
    lines = [f"{'ENTRY ' if is_entry else ''}%{comp.name} ({params}) -> {result} {{"]
    for instr in order if order is not None else comp.post_order():
        prefix = "  ROOT " if instr is comp.root else "  "
        lines.append(prefix + _instruction_text(instr, opts))
    closing = "}"
    if comp.execution_thread not in ("", "main"):
        closing += f', execution_thread="{c_escape(comp.execution_thread)}"'
    lines.append(closing)
    return "\n".join(lines)


# ---- instructions -------------------------------------------------------------------------
def _instruction_text(instr: Instruction, opts: PrintOptions) -> str:
    text = (f"%{instr.name} = {shape_text(instr.shape)} {instr.opcode.value}("
            f"{_operands_text(instr, opts)})")
    attrs = _attributes(instr, opts)
    if attrs:
        text += ", " + ", ".join(attrs)
    if opts.print_ids:
        text += f" /*id={instr.id}*/"
    return text


def _operands_text(instr: Instruction, opts: PrintOptions) -> str:
    if instr.opcode == Opcode.PARAMETER:
        return str(instr.attrs.parameter_number)
    if instr.opcode == Opcode.CONSTANT:
        return _constant_text(instr, opts)
    pieces = []
    for i, op in enumerate(instr.operands):
        if i == 0:
            pieces.append(f"%{op.name}")
        elif i % 5 == 0:
            pieces.append(f", /*index={i}*/%{op.name}")
        else:
            pieces.append(f", %{op.name}")
    return "".join(pieces)


def _constant_text(instr: Instruction, opts: PrintOptions) -> str:
    lit = instr.attrs.literal
    if lit is None:
        return "{...}"
    shape = instr.shape
    if not opts.print_large_constants and (shape.is_tuple or shape.num_elements > 10):
        return "{...}"
    return format_literal(lit)


def _attributes(instr: Instruction, opts: PrintOptions) -> list[str]:
    out: list[str] = []
    printer = ATTR_PRINTERS.get(instr.opcode)
    if printer is not None:
        printer(instr, out)
    (CALLED_PRINTERS.get(instr.opcode) or CALLED_PRINTERS.lookup(None))(instr, out)
    a = instr.attrs
    if a.sharding is not None:
        out.append(f"sharding={a.sharding}")
    if a.frontend_attributes:
        out.append("frontend_attributes=" + format_frontend_attributes(a.frontend_attributes))
    if instr.control_predecessors:
        out.append("control-predecessors={" + ", ".join(
            f"%{p.name}" for p in instr.control_predecessors) + "}")
    if opts.print_metadata:
        meta = _metadata_text(instr)
        if meta:
            out.append(f"metadata={{{meta}}}")
    if opts.print_backend_config and a.backend_config:
        cfg = a.backend_config
        out.append("backend_config=" + (cfg if lexes_as_json_dict(cfg) else f'"{c_escape(cfg)}"'))
    return out


def _metadata_text(instr: Instruction) -> str:
    m = instr.metadata
    if not (m.op_type or m.op_name or m.source_file or m.scheduling_name or m.stack_frame_id):
        return ""
    parts = []
    for key in ("op_type", "op_name", "source_file"):
        value = getattr(m, key)
        if value:
            parts.append(f'{key}="{c_escape(value)}"')
    for key in ("source_line", "source_end_line", "source_column", "source_end_column"):
        value = getattr(m, key)
        if value:
            parts.append(f"{key}={value}")
    for key in ("deduplicated_name", "scheduling_name"):
        value = getattr(m, key)
        if value:
            parts.append(f'{key}="{c_escape(value)}"')
    if m.stack_frame_id:
        parts.append(f"stack_frame_id={m.stack_frame_id}")
    return " ".join(parts)

