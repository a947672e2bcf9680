"""The one place a bundle's manifest and members are put together.

`hloc compile` (hloc.compiler.compile_module) and every test harness go through
`assemble_bundle`, so the manifest of a bundle cannot depend on which path built it.
"""

from __future__ import annotations

import hashlib
from dataclasses import field
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..frontend import literal_to_bytes, module_to_proto
from ..ir import Literal, Module
from ..ir.text.printer import print_module
from ..util.record import dataclass
from .devices import devices_section
from .format import FORMAT_VERSION, version_text
from .manifest import entry_section

if TYPE_CHECKING:
    from ..compiler import CompileOptions
    from ..plan import Plan


@dataclass(frozen=True)
class Source:
    """What the manifest's "input" section records about the compiler's input."""

    sha256: str
    form: str  # one of manifest.INPUT_FORMS
    # An HloSnapshot's arguments travel with the bundle: hlo-run uses them for every
    # parameter not given with --inputs.
    arguments: tuple = ()

    @classmethod
    def of_bytes(cls, data: bytes, form: str, arguments=()) -> Source:
        return cls(hashlib.sha256(data).hexdigest(), form, tuple(arguments))

    @classmethod
    def of_module(cls, module: Module) -> Source:
        """A module built in memory: its (deterministic) HloModuleProto is the input."""
        proto = module_to_proto(module).SerializeToString(deterministic=True)
        return cls.of_bytes(proto, "HloModuleProto")


@dataclass(frozen=True)
class CodeOutput:
    """What code generation adds to a bundle."""

    members: dict[str, bytes] = field(repr=False)
    target: dict  # the manifest's "target" section
    notes: list[str] = field(default_factory=list)


def assemble_bundle(module: Module, plan: Plan, code: CodeOutput, *, options: CompileOptions,
                    passes: list[str], source: Source,
                    cache_key: str | None = None) -> tuple[dict, dict[str, bytes]]:
    """(manifest, members) of the bundle of `module` after its passes, plan and code."""
    members = {
        "module.pb": module_to_proto(module).SerializeToString(deterministic=True),
        "module.hlo": print_module(module).encode(),
        **plan.members(),
        **code.members,
    }
    if source.arguments:
        members["snapshot_arguments.pb"] = literal_to_bytes(Literal.tuple_of(source.arguments))
    manifest: dict[str, Any] = {  # the manifest's JSON object
        "format_version": version_text(FORMAT_VERSION),
        "hloc_version": __version__,
        "target": code.target,
        "entry": entry_section(module),
        "compiler": {"version": __version__, "flags": options.manifest_flags(),
                     "passes": list(passes), "opt_level": options.opt_level},
        "input": {"sha256": source.sha256, "form": source.form, "module_name": module.name},
        "memory": plan.memory.as_dict(),
        "thunks": {"counts": plan.program.kind_counts()},
        "notes": list(code.notes),
    }
    if cache_key is not None:
        manifest["compiler"]["cache_key"] = cache_key
    devices = devices_section(module)
    if devices is not None:  # multi-device modules only: one-device bundles stay as they were
        manifest["devices"] = devices
    return manifest, members
