"""Compile an HLO module for CUDA into a bundle, the way `hloc compile --target cuda` does.

Used by tests and tools (and as the reference for the compile driver's CUDA stage):
passes for the cuda target → hloc.buffers.plan → compile_cuda → bundle members, with the
module serialized *after* planning (copy insertion and scheduling change it, and the GPU
schedule names its instructions).
"""

from __future__ import annotations

import hashlib
import os
import tempfile

from ...ir import Module


def compile_to_bundle(module: Module, path: str, *, archs=("sm_80",), opt_level: int = 2,
                      passes: str | None = None) -> dict:
    """Run the cuda pipeline on `module` (in place) and write a CUDA bundle to `path`."""
    from ... import __version__
    from ...buffers import plan as make_plan
    from ...bundle import entry_section, write_bundle
    from ...compiler import CompileOptions, run_passes
    from ...frontend import module_to_proto
    from ...ir.printer import print_module
    from .compile import compile_cuda

    options = CompileOptions(target="cuda", cuda_archs=tuple(archs), opt_level=opt_level,
                             passes=passes)
    runner = run_passes(module, options, None)
    planned = make_plan(module, target="cuda")
    members, extra = compile_cuda(module, planned, options)
    dataflow_order(module)
    proto = module_to_proto(module).SerializeToString(deterministic=True)
    members.update({"module.pb": proto, "module.hlo": print_module(module).encode()})
    members.update(planned.members())
    manifest = {
        "format_version": "1.0", "hloc_version": __version__,
        "target": {"kind": "cuda", **extra["target"]},
        "entry": entry_section(module),
        "compiler": {"version": __version__, "flags": options.manifest_flags(),
                     "passes": runner.ran, "opt_level": opt_level},
        "input": {"sha256": hashlib.sha256(proto).hexdigest(), "form": "HloModuleProto",
                  "module_name": module.name},
        "memory": planned.memory.as_dict(),
        "notes": extra["notes"],
    }
    return write_bundle(path, manifest=manifest, members=members)


def dataflow_order(module: Module) -> None:
    """Put every computation's instructions in dataflow order (operands and control
    predecessors first): copy insertion appends copies that earlier instructions use, and
    the proto form requires definitions before uses."""
    for comp in module.computations:
        comp.instructions = comp.post_order()


def load_emulated(module: Module, **kwargs):
    """Compile `module` to a temporary CUDA bundle and load it on the emulator."""
    from ...bundle import read_bundle
    from ...runtime.cuda_emulated import CudaEmulatedExecutable

    with tempfile.TemporaryDirectory(prefix="hloc-cuda-") as tmp:
        path = os.path.join(tmp, "m.bundle")
        compile_to_bundle(module, path, **kwargs)
        return CudaEmulatedExecutable(read_bundle(path))
