"""The sides `hloc diff` compares: a module, a bundle or a `--dump-dir` directory.

Each becomes a `Side`: its final HLO module (a bundle's optimized module; a dump directory's
last module, after scheduling when present), flat metrics (see `metrics()`), its fusions and,
for dump directories, the instruction count after every dumped pass.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import field

from ..errors import InputError
from ..ir import Module, Opcode
from ..util.record import dataclass

MEMORY_KEYS = ("temp_bytes", "argument_bytes", "output_bytes", "constant_bytes")


@dataclass
class Side:
    """One side of a diff."""

    path: str
    kind: str  # "module", "bundle" or "dumps"
    module: Module
    memory: dict[str, int] = field(default_factory=dict)
    thunks: dict[str, int] | None = None
    stages: dict[str, int] = field(default_factory=dict)  # "after_dce#2" -> instructions

    def metrics(self) -> dict[str, int]:
        """Flat metrics: instructions, computations, fusions, op:NAME, memory, thunks[:KIND]."""
        ops = Counter(i.opcode.value for c in self.module.computations for i in c.instructions)
        out = {"instructions": self.module.instruction_count(),
               "computations": len(self.module.computations),
               "fusions": ops.get("fusion", 0)}
        out.update({f"op:{name}": n for name, n in sorted(ops.items())})
        out.update({k: v for k, v in self.memory.items() if v is not None})
        if self.thunks is not None:
            out["thunks"] = sum(self.thunks.values())
            out.update({f"thunks:{k}": v for k, v in sorted(self.thunks.items())})
        return out

    def fusions(self) -> list[str]:
        """Each fusion as "KIND: fused opcodes (sorted)", e.g. "kLoop: add,exponential,multiply"."""
        out = []
        for comp in self.module.computations:
            for instr in comp.instructions:
                if instr.opcode != Opcode.FUSION:
                    continue
                fused = sorted(i.opcode.value for i in instr.called[0].instructions
                               if i.opcode != Opcode.PARAMETER)
                out.append(f"{instr.attrs.fusion_kind or 'fusion'}: {','.join(fused)}")
        return sorted(out)


def load_side(path: str) -> Side:
    """A module file (any form), a bundle or a dump directory, told apart by content."""
    if os.path.isdir(path):
        return _from_dumps(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path) from None
    from ..bundle.format import MAGIC

    if head == MAGIC:
        return _from_bundle(path)
    from ..frontend import load

    return Side(path, "module", load(path).module)


def _from_bundle(path: str) -> Side:
    from ..bundle import read_bundle
    from ..frontend import load_bytes

    bundle = read_bundle(path)
    manifest = bundle.manifest
    module = load_bytes(bytes(bundle.module_proto), f"{path}:module.pb").module
    memory = {k: manifest.get("memory", {}).get(k) for k in MEMORY_KEYS}
    thunks = manifest.get("thunks", {}).get("counts") if isinstance(manifest.get("thunks"), dict) else None
    return Side(path, "bundle", module, memory, dict(thunks) if thunks is not None else None)


# Lines of dumped artifacts this reads: "memory: temp_bytes=8512 argument_bytes=..." in
# buffer_assignment.txt and "sequence (gemm: 1, kernel: 7):" in thunks.txt.
_MEMORY_LINE = re.compile(r"^memory:((?:\s+\w+=\d+)+)\s*$", re.M)
_SEQUENCE_LINE = re.compile(r"^sequence \(([^)]*)\):", re.M)
_INSTRUCTION_LINE = re.compile(r"^\s+(?:ROOT\s+)?%?[\w.\-]+\s*=\s", re.M)


def _from_dumps(path: str) -> Side:
    from ..ir.text.parser import parse_module

    index_path = os.path.join(path, "index.json")
    try:
        with open(index_path, encoding="utf-8") as f:
            files = [e["file"] for e in json.load(f)["files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"not a dump directory (index.json: {e})", path) from None
    hlo = [f for f in files if f.endswith(".hlo")]
    if not hlo:
        raise InputError("the dump directory has no HLO text dumps (--dump-format text)", path)
    texts = {f: _read_text(os.path.join(path, f)) for f in hlo}
    stages: dict[str, int] = {}
    seen: Counter = Counter()
    for f in hlo:
        label = _label(f)
        seen[label] += 1
        key = label if seen[label] == 1 else f"{label}#{seen[label]}"
        stages[key] = len(_INSTRUCTION_LINE.findall(texts[f]))
    module = parse_module(texts[hlo[-1]], os.path.join(path, hlo[-1]))
    side = Side(path, "dumps", module, stages=stages)
    for f in files:
        if f.endswith("buffer_assignment.txt"):
            side.memory = _memory(_read_text(os.path.join(path, f)))
        elif f.endswith("thunks.txt"):
            side.thunks = _thunk_counts(_read_text(os.path.join(path, f)))
    return side


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"cannot read dump file: {e.strerror}", path) from None


def _label(file: str) -> str:
    """"0005.jit_f.after_fusion.hlo" -> "after_fusion" (repeats get "#2", "#3" in stages)."""
    return file[: -len(".hlo")].rsplit(".", 1)[-1]


def _memory(text: str) -> dict[str, int]:
    m = _MEMORY_LINE.search(text)
    if m is None:
        return {}
    pairs = (item.split("=") for item in m.group(1).split())
    return {k: int(v) for k, v in pairs if k in MEMORY_KEYS}


def _thunk_counts(text: str) -> dict[str, int] | None:
    m = _SEQUENCE_LINE.search(text)
    if m is None:
        return None
    pairs = (item.split(":") for item in m.group(1).split(",") if ":" in item)
    return {k.strip(): int(v) for k, v in pairs}
