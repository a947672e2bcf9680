"""Stage dumps: numbered files for every stage plus an index.json (`--dump-dir`, HLOC_DUMP_DIR).

File names are stable: `NNNN.MODULE.LABEL.EXT`, e.g. `0000.jit_f.before_optimizations.hlo`,
`0005.jit_f.after_fusion.hlo`, `0012.jit_f.buffer_assignment.txt`. The index lists every file
with its stage, pass, whether the pass changed the module, the time taken and a content hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import field
from typing import TYPE_CHECKING

from .errors import InputError
from .util.fs import atomic_write
from .util.record import dataclass

if TYPE_CHECKING:
    from .ir import Module

FORMATS = ("text", "proto", "dot")


@dataclass
class DumpOptions:
    directory: str
    after: str | None = None  # regex over pass names limiting per-pass HLO dumps
    formats: tuple[str, ...] = ("text",)

    @staticmethod
    def parse_formats(text: str) -> tuple[str, ...]:
        formats = tuple(f.strip() for f in text.split(",") if f.strip())
        bad = [f for f in formats if f not in FORMATS]
        if bad or not formats:
            raise InputError(f"bad --dump-format '{text}': choose from {','.join(FORMATS)}")
        return formats


@dataclass
class DumpManager:
    """Writes dump files in order and keeps the index."""

    options: DumpOptions
    module_name: str
    entries: list[dict] = field(default_factory=list)
    _pattern: re.Pattern | None = None

    def __post_init__(self) -> None:
        try:
            os.makedirs(self.options.directory, exist_ok=True)
        except OSError as e:
            raise InputError(f"cannot create dump directory: {e.strerror}", self.options.directory) from None
        if self.options.after:
            try:
                self._pattern = re.compile(self.options.after)
            except re.error as e:
                raise InputError(f"bad --dump-after regex '{self.options.after}': {e}") from None
        self.module_name = re.sub(r"[^\w.\-]", "_", self.module_name)

    def wants_pass(self, pass_name: str) -> bool:
        return self._pattern is None or bool(self._pattern.search(pass_name))

    def _write(self, label: str, ext: str, data: bytes | str, **meta) -> None:
        number = len(self.entries)
        name = f"{number:04d}.{self.module_name}.{label}.{ext}"
        payload = data.encode() if isinstance(data, str) else data
        atomic_write(os.path.join(self.options.directory, name), payload)
        self.entries.append({"file": name, "sha256": hashlib.sha256(payload).hexdigest(), **meta})

    def module(self, label: str, module: Module, *, stage: str = "passes", pass_name: str | None = None,
               changed: bool | None = None, seconds: float | None = None) -> None:
        """Dump an HLO module in every requested format."""
        from .frontend import module_to_proto
        from .ir.dot_graph import module_to_dot
        from .ir.text.printer import print_module

        meta = {"stage": stage, "pass": pass_name, "changed": changed,
                "seconds": None if seconds is None else round(seconds, 6)}
        if "text" in self.options.formats:
            self._write(label, "hlo", print_module(module), **meta)
        if "proto" in self.options.formats:
            self._write(label, "pb", module_to_proto(module).SerializeToString(deterministic=True), **meta)
        if "dot" in self.options.formats:
            self._write(label, "dot", module_to_dot(module), **meta)

    def artifact(self, label: str, ext: str, data: bytes | str, *, stage: str) -> None:
        """Dump a later-stage artifact (buffer assignment, thunks, LLVM IR, PTX, object code)."""
        self._write(label, ext, data, stage=stage, **{"pass": None, "changed": None, "seconds": None})

    def finish(self) -> None:
        index = {"module": self.module_name, "files": self.entries}
        atomic_write(os.path.join(self.options.directory, "index.json"),
                     json.dumps(index, indent=1, sort_keys=True) + "\n")
