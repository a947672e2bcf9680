"""`hloc inspect --json` → `thunk_list`: every thunk of a bundle in schedule order.

Each entry (nested thunks flattened depth-first right after their parent, as thunks.txt and
gpu_thunks.txt list them):

    {"index": 0, "name": "fusion.5", "kind": "kernel", "parent": null, "depth": 0,
     "region": null, "hlo": ["fusion.5:fusion", "dot.1:dot", "add.3:add", ...],
     "outputs": [{"allocation": 10, "offset": 0, "size": 4864}]}

- `index`: position in the flattened schedule; `parent`: the name of the control-flow thunk it
  is nested in (null at the top level) and `region` which of its sequences ("condition",
  "body", "branch 1", "thunks"); thunk names are unique (HLO instruction names).
- `hlo`: the HLO instructions the thunk covers, each as "name:opcode": the thunk's instruction
  first, then for a fusion every fused instruction but parameters, in post order. Thunks of a
  control-flow instruction list that instruction only (their nested thunks list theirs).
- `outputs`: the slices the thunk itself writes (`Thunk.writes()`). A GPU kernel launch
  cannot say which of its arguments it writes, so all its arguments are listed.
CUDA bundles list their GPU program (gpu_thunks.json), CPU bundles their thunk program.
"""

from __future__ import annotations

from ..ir import Opcode
from ..thunks.base import Role, Thunk, field_roles, walk


def hlo_ops(instr) -> list[str]:
    """The "name:opcode" list of the HLO an instruction's thunk covers ([] for None)."""
    if instr is None:
        return []
    ops = [f"{instr.name}:{instr.opcode.value}"]
    if instr.opcode == Opcode.FUSION and instr.called:
        ops += [f"{i.name}:{i.opcode.value}" for i in instr.called[0].post_order()
                if i.opcode != Opcode.PARAMETER]
    return ops


def hlo_text(instr) -> str:
    """The instruction as HLO text, followed by its fused computation for a fusion."""
    from ..ir.text.printer import print_computation, print_instruction

    if instr is None:
        return "(no HLO instruction)"
    text = print_instruction(instr).strip()
    if instr.opcode == Opcode.FUSION and instr.called:
        text += "\n" + print_computation(instr.called[0]).rstrip()
    return text


def _regions(thunk: Thunk) -> list[str]:
    """The region name of each of thunk.nested(), in order."""
    names: list[str] = []
    for f in field_roles(type(thunk)):
        if f.role is Role.SEQUENCE:
            names.append(f.name)
        elif f.role is Role.BRANCHES:
            names += [f"branch {i}" for i in range(len(getattr(thunk, f.name)))]
    return names


def _region_of(parent: Thunk, child: Thunk) -> str:
    for name, seq in zip(_regions(parent), parent.nested(), strict=True):
        if any(t is child for t in seq):
            return name
    return ""


def program_of(bundle):
    """(module, top-level thunk sequence) of a bundle: the GPU program for CUDA bundles."""
    from ..frontend import load_bytes
    from ..thunks.serialize import gpu_program_from_json, program_from_json

    module = load_bytes(bytes(bundle.module_proto), f"{bundle.path}:module.pb").module
    if "gpu_thunks.json" in bundle.members:
        program, _ = gpu_program_from_json(bytes(bundle.members["gpu_thunks.json"]))
        return module, program.main
    if "thunks.json" in bundle.members:
        return module, program_from_json(bytes(bundle.members["thunks.json"])).sequence
    return module, ()


def thunk_list(bundle) -> list[dict]:
    """The `thunk_list` entries of a bundle (empty for interpreter bundles)."""
    module, sequence = program_of(bundle)
    instructions = {i.name: i for c in module.computations for i in c.instructions}
    out = []
    for index, visit in enumerate(walk(sequence)):
        t, parent = visit.thunk, visit.parent
        out.append({"index": index, "name": t.name, "kind": str(t.kind),
                    "parent": None if parent is None else parent.name,
                    "region": None if parent is None else _region_of(parent, t),
                    "depth": visit.depth, "hlo": hlo_ops(instructions.get(t.name)),
                    "outputs": [{"allocation": s.allocation, "offset": s.offset, "size": s.size}
                                for s in t.writes()]})
    return out
