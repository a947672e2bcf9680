"""Graphviz rendering of computations (`--dump-format dot`); fusions are drawn as clusters."""

from __future__ import annotations

from .computation import Computation
from .module import Module
from .opcodes import Opcode


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _node_id(comp: Computation, name: str) -> str:
    return _q(f"{comp.name}/{name}")


def _computation_body(comp: Computation, lines: list[str], indent: str) -> None:
    for instr in comp.instructions:
        label = f"{instr.name}\\n{instr.opcode.value}\\n{instr.shape.to_text(False)}"
        style = ",style=filled,fillcolor=lightgrey" if instr is comp.root else ""
        lines.append(f"{indent}{_node_id(comp, instr.name)} [label={_q(label)}{style}];")
        if instr.opcode == Opcode.FUSION and instr.called:
            fused = instr.called[0]
            lines.append(f"{indent}subgraph {_q('cluster_' + comp.name + '/' + instr.name)} {{")
            lines.append(f"{indent}  label={_q(instr.name + ' (' + (instr.attrs.fusion_kind or '') + ')')};")
            lines.append(f"{indent}  style=dashed;")
            _computation_body(fused, lines, indent + "  ")
            lines.append(f"{indent}}}")
            if fused.root is not None:
                lines.append(f"{indent}{_node_id(fused, fused.root.name)} -> {_node_id(comp, instr.name)} [style=dotted];")
        for op in instr.operands:
            lines.append(f"{indent}{_node_id(comp, op.name)} -> {_node_id(comp, instr.name)};")


def module_to_dot(module: Module) -> str:
    """One digraph with a cluster per non-fusion computation."""
    lines = [f"digraph {_q(module.name)} {{", "  node [shape=box,fontname=monospace];"]
    for comp in module.computations:
        if comp.is_fusion:
            continue
        lines.append(f"  subgraph {_q('cluster_' + comp.name)} {{")
        lines.append(f"    label={_q(comp.name + (' (ENTRY)' if comp is module.entry else ''))};")
        _computation_body(comp, lines, "    ")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
