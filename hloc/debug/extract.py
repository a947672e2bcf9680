"""`hloc extract BUNDLE --thunk NAME -o DIR`: one thunk as a standalone, self-checking test.

The bundle runs (cpu, or cuda-emulated for CUDA bundles) on the given or deterministic random
inputs until NAME is about to run for the first time; its operands are read from the arena
then. DIR gets:

- `module.hlo`: the thunk's HLO as a module. A fusion's fused computation becomes the entry
  (its parameters are the fusion's operands, in order); any other instruction is applied to
  one parameter per operand. Computations it calls (reducers, comparators) come along.
- `inputs.npz` (arg0, arg1, ...): the captured operands.
- `expected.npz` (out0, ...): the reference interpreter's result of module.hlo on them.
- `thunk.json`: where it came from (bundle, thunk, kind, HLO ops).

so that `hloc compile DIR/module.hlo -o t.bundle && hlo-run t.bundle --inputs DIR/inputs.npz
--expected DIR/expected.npz` reproduces the thunk alone.
"""

from __future__ import annotations

import json
import os

import numpy as np

from ..errors import InputError
from ..ir import Computation, Instruction, Module, Opcode
from ..ir.attrs import Attrs
from ..ir.module import clone_computation
from .perturb import check_name
from .probe import Frame, Instrumented, Stop
from .thunk_io import ThunkIO, thunk_io


class _Capture:
    """The probe: read the operands of `name` before its first run, then stop."""

    def __init__(self, target: Instrumented, io: ThunkIO):
        self.target, self.io = target, io
        self.inputs: list | None = None

    def around(self, frame: Frame, run) -> None:
        if frame.thunk.name == self.io.thunk.name and self.inputs is None:
            self.inputs = self.io.read_inputs(self.target.raw)
            raise Stop
        run()


def capture(target: Instrumented, name: str, args: list) -> tuple[ThunkIO, list[np.ndarray]]:
    """(the thunk's IO, its operands as it is about to run first)."""
    check_name(name, target.by_name, "extract --thunk")
    mod = target.module
    instructions = {i.name: i for c in mod.computations for i in c.instructions}
    neutral = target.neutral.get(name)
    io = None if neutral is None else thunk_io(neutral, instructions)
    if io is None or io.instruction is None:
        kind = target.by_name[name].kind
        raise InputError(f"extract --thunk {name}: a {kind} thunk has no HLO computation of its "
                         f"own to extract (extract the thunks nested in it, or a kernel)")
    probe = _Capture(target, io)
    target.run(args, [probe])
    if probe.inputs is None:
        raise InputError(f"extract --thunk {name}: the thunk did not run on these inputs "
                         f"(a branch or loop body not taken)")
    if any(isinstance(v, tuple) or v is None for v in probe.inputs):
        raise InputError(f"extract --thunk {name}: tuple or token operands are not supported")
    return io, probe.inputs


def standalone_module(instr: Instruction) -> Module:
    """A module computing `instr` alone (see the module docstring)."""
    module = Module(f"extract_{instr.name}")
    comp_map: dict[int, Computation] = {}
    for comp in _called(instr):
        copy = clone_computation(comp, comp_map)
        comp_map[id(comp)] = copy
        module.add_computation(copy)
    if instr.opcode == Opcode.FUSION:
        entry = clone_computation(instr.called[0], comp_map, name="main")
        entry.is_fusion = False
        module.add_computation(entry, entry=True)
        return module

    entry = Computation("main")
    params = [Instruction(Opcode.PARAMETER, op.shape, name=f"p{i}", attrs=Attrs(parameter_number=i))
              for i, op in enumerate(instr.operands)]
    for p in params:
        entry.add(p)
    root = Instruction(instr.opcode, instr.shape, params, name=instr.name,
                       called=[comp_map[id(c)] for c in instr.called], attrs=instr.attrs)
    entry.add(root)
    entry.root = root
    module.add_computation(entry, entry=True)
    return module


def _called(instr: Instruction) -> list:
    """Computations reachable from `instr` (fusion body excluded), callees first."""
    order: list = []
    seen: set[int] = set()

    def visit(comp) -> None:
        if id(comp) in seen:
            return
        seen.add(id(comp))
        for i in comp.instructions:
            for c in i.called:
                visit(c)
        order.append(comp)
    roots = instr.called[0].instructions if instr.opcode == Opcode.FUSION else [instr]
    for i in roots:
        for c in i.called:
            visit(c)
    return order


def write_directory(directory: str, bundle_path: str, io: ThunkIO, inputs: list) -> list[str]:
    """Write module.hlo, inputs.npz, expected.npz and thunk.json; the paths written."""
    from ..frontend import load
    from ..ir.text.printer import print_module
    from ..ir.verifier import verify
    from ..runtime.interpreter import evaluate
    from ..runtime.io import write_outputs
    from ..util.fs import atomic_write
    from .thunk_list import hlo_ops

    text = print_module(standalone_module(io.instruction))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create directory: {e.strerror}", directory) from None
    paths = [os.path.join(directory, n) for n in ("module.hlo", "inputs.npz", "expected.npz",
                                                  "thunk.json")]
    atomic_write(paths[0], text)
    module = load(paths[0]).module
    verify(module)
    write_outputs(paths[1], inputs)
    _rename_keys(paths[1], "out", "arg")
    write_outputs(paths[2], evaluate(module, inputs).flatten())
    meta = {"bundle": str(bundle_path), "thunk": io.thunk.name, "kind": io.kind,
            "hlo": hlo_ops(io.instruction)}
    atomic_write(paths[3], json.dumps(meta, indent=1) + "\n")
    return paths


def _rename_keys(path: str, old: str, new: str) -> None:
    """out0.. → arg0.. in an npz written by write_outputs (dtype notes included)."""
    from pathlib import Path

    from ..runtime.io import DTYPES_KEY, _write_npz_atomic

    with np.load(path) as z:
        entries = {k.replace(old, new, 1) if k.startswith(old) else k: z[k] for k in z.files}
    if DTYPES_KEY in entries:
        notes = json.loads(str(entries[DTYPES_KEY]))
        entries[DTYPES_KEY] = np.array(json.dumps({k.replace(old, new, 1): v for k, v in notes.items()}))
    _write_npz_atomic(Path(path), entries)
