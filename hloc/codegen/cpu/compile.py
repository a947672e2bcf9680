"""`compile_cpu`: a planned module → the CPU bundle members (object code for every kernel).

Every Kernel thunk of the thunk program (nested ones included) becomes one kernel of the
emitter's ABI (spec.py), named `kernel_symbol(thunk name)`, all in one LLVM module; identical
kernels share one symbol (dedup.py). The module is compiled as partitions on several threads
(llvm_split), one relocatable object each: `cpu.o` when it is compiled whole, else `cpu.0.o`,
`cpu.1.o`, ... (the loader resolves the symbols one object calls and another defines).
Sort thunks and small Gemm / Convolution thunks get kernels too (thunk_kernels.NATIVE_KINDS; if
one cannot be emitted its kind's runtime path runs). A fusion around big dots or convolutions
becomes a *composite* (outline.py): BLAS for the contraction, kernels for what is computed
before and after it. A Kernel thunk the emitter cannot generate (stochastic-convert, f8e8m0fnu,
...: UnsupportedError) becomes a *host fallback*: the runtime runs the reference interpreter's
implementation of the instruction on views of the arena.
Runs of small thunks and whole loops of them get a native *driver* (driver.py) that runs
them without returning to Python. `kernels.json` lists all of it, so `hloc inspect` and the
runtime see the same facts.

kernels.json (version 3):
  {"version": 3, "objects": [{"member": "cpu.o" | "cpu.N.o", "sha256": of that member}],
   "abi": str, "target": {...}, "opt_level": int,
   "thunks_sha256": sha256 of thunks.json (the hashes bind the members to each other: the
   validator refuses an object or thunks.json from elsewhere),
   "external_symbols": [names the objects import and none defines: libm],
   "kernels": {thunk name: {"symbol", "parallel_extent", "num_operands", "num_outputs",
               "segments", "instruction_names", "aliases": [[output, operand]],
               "work": rough scalar operations of the whole kernel}},
   "composites": {thunk name: {"scratch": [[offset, size]], "scratch_bytes": int,
               "steps": [{"kind": "kernel", "buffers": [ref], ...kernel fields} |
                         {"kind": "gemm", "instruction", "lhs", "rhs", "output"} |
                         {"kind": "convolution", "instruction", "input", "kernel", "output"}]}},
   "drivers": [{"symbol", "thunks": [consecutive thunk names it runs], "slots": [ref]}],
   "fallbacks": {thunk name: {"opcode", "reason"}}}
  Driver slots (driver.py) are ["buffers", kernel thunk name] | ["slice", [alloc, offset, size]]
  | ["gemm", gemm thunk name] | ["step", [composite thunk name, step index]].
  A ref is ["operand", i] | ["output", k] | ["scratch", j]; "instruction" names the
  contraction inside the fused computation. A composite's "scratch" ranges are offsets in
  its thunk's `scratch` slice (thunks.json: buffer assignment placed it) when that slice
  holds scratch_bytes, else in the runtime's own scratch allocation (earlier bundles).
Version 2 (bundles of earlier hlocs, still loaded) had one object: "object": "cpu.o" and
"object_sha256" in place of "objects".
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import field, replace

from llvmlite import ir

from ...errors import InputError, UnsupportedError
from ...ir import Module
from ...thunks import program_to_json
from ...util.log import get_logger
from ...util.record import dataclass
from .. import llvm
from ..llvm_split import map_partitions
from .dedup import kernel_key
from .driver import driver_composites, driver_gemms, driver_host_jobs, emit_drivers, plan_drivers
from .kernel import emit_kernel
from .kernel_spec import KernelInfo
from .thunk_kernels import composite_json, kernel_groups, kernel_json, loop_free, windowed, work

log = get_logger("hloc.codegen.cpu")

KERNELS_VERSION = 3
ABI = ("void NAME(i8** buffers, i64 begin, i64 end); buffers: operand leaves then output "
       "leaves; [begin, end) work units of parallel_extent")


@dataclass(frozen=True)
class CpuArtifacts:
    """What compiling a module for the CPU produces."""

    members: dict[str, bytes] = field(repr=False)  # cpu.o, kernels.json, module.ll, ...
    target_manifest: dict  # the manifest's "target" section
    dumps: tuple[tuple[str, str, bytes], ...] = field(repr=False, default=())  # (label, ext, data)
    kernels: dict[str, KernelInfo] = field(default_factory=dict)
    fallbacks: dict[str, str] = field(default_factory=dict)  # thunk name -> reason


def compile_cpu(module: Module, plan, target=None, opt_level: int = 2, *,
                assembly: bool = True) -> CpuArtifacts:
    """Emit and compile every Kernel thunk of `plan.program` for `target` (default: host).

    `assembly=False` leaves out module.s (generating it costs about a third of the LLVM
    time: worth it for dumps, not for every compile)."""
    from ..target import host_target

    target = target or host_target()
    groups, fallbacks = kernel_groups(module, plan.program, opt_level)
    ir_module, infos, failed, light = emit_all(groups, target)
    fallbacks.update(failed)
    # Optional groups (sort, small gemm, ...) that failed are in neither: they keep their
    # thunk kind's own runtime path.
    emitted = [g for g in groups if all(s.name in infos for s in g.specs)]
    kernels, composites = _kernel_entries(emitted, infos)
    drivers = plan_drivers(plan.program, kernels, driver_gemms(module, plan.program),
                           driver_composites(module, composites),
                           driver_host_jobs(module, plan.program))
    emit_drivers(ir_module, drivers, plan.program, kernels, composites)
    text = str(ir_module)
    compiled = compile_llvm(text, target, opt_level, assembly, light=light)
    members = _code_members(text, compiled)
    names = object_names(len(compiled))
    doc = {"version": KERNELS_VERSION, "abi": ABI,
           "objects": [{"member": name, "sha256": hashlib.sha256(members[name]).hexdigest()}
                       for name in names],
           "thunks_sha256": hashlib.sha256(program_to_json(plan.program)).hexdigest(),
           "module": module.name, "target": target.describe(), "opt_level": opt_level,
           "external_symbols": object_imports([members[n] for n in names]), "kernels": kernels,
           "composites": composites, "drivers": [d.to_json() for d in drivers],
           "fallbacks": dict(sorted(fallbacks.items()))}
    members["kernels.json"] = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    dumps = tuple((label, ext, members[name]) for label, ext, name in (
        ("cpu.module", "ll", "module.ll"), ("cpu.module.opt", "ll", "module.opt.ll"),
        ("cpu.module", "s", "module.s"), ("cpu.kernels", "json", "kernels.json"))
        if name in members)
    return CpuArtifacts(members, target_manifest(target), dumps, infos,
                        {k: v["reason"] for k, v in fallbacks.items()})


def object_names(count: int) -> list[str]:
    """The bundle members of a module compiled as `count` objects (one per partition)."""
    return ["cpu.o"] if count == 1 else [f"cpu.{i}.o" for i in range(count)]


def _code_members(text: str, compiled: list[llvm.CompiledCode]) -> dict[str, bytes]:
    """The objects, the IR before optimization, and the optimized IR (and assembly) of every
    partition, one after the other under a comment naming its object."""
    names = object_names(len(compiled))
    members = {name: code.object_code for name, code in zip(names, compiled, strict=True)}

    def joined(texts: list[str]) -> bytes:
        if len(texts) == 1:
            return texts[0].encode()
        parts = zip(names, texts, strict=True)
        return "".join(f"; ---- {name} ----\n{t}" for name, t in parts).encode()

    members["module.ll"] = text.encode()
    members["module.opt.ll"] = joined([code.optimized_ir for code in compiled])
    if compiled[0].assembly is not None:
        members["module.s"] = joined([code.assembly or "" for code in compiled])
    return members


def compile_threads() -> int:
    """Threads for LLVM's work: HLOC_COMPILE_THREADS, else one per core. The objects are the
    same for any count (llvm_split's partitions are fixed)."""
    value = os.environ.get("HLOC_COMPILE_THREADS", "").strip()
    if not value:
        return os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise InputError(f"HLOC_COMPILE_THREADS must be a positive integer, not {value!r}")
    return int(value)


def compile_llvm(text: str, target, opt_level: int, assembly: bool = True,
                 threads: int | None = None, light: frozenset[str] = frozenset()
                 ) -> list[llvm.CompiledCode]:
    """Every partition of `text` (llvm_split) optimized and emitted to an object (and
    optionally assembly) in its own LLVM context, on `threads` threads (compile_threads()
    by default); one CompiledCode per partition, in partition order. `light`: the small
    loop-free kernels (emit_all), optimized with llvm.SMALL_KERNEL_PASSES."""
    llvm.initialize()
    return map_partitions(
        text, lambda part: llvm.compile_in_context(part.text, target, opt_level,
                                                   vectorize=not part.scalar, assembly=assembly,
                                                   light=part.light),
        threads or compile_threads(), light=light)


def target_manifest(target) -> dict:
    """The manifest's target section: what a host needs to run the object code."""
    return {"kind": "cpu", "triple": target.triple, "cpu": target.cpu,
            "cpu_features": sorted(target.required_features)}


# ---- emission -------------------------------------------------------------------------------

def emit_all(groups, target):
    """One LLVM module with every kernel group the emitter supports; the others are
    returned as host fallbacks. Also the names of the small loop-free kernels' functions
    (compile_llvm's `light`)."""
    module = ir.Module(name="hloc_cpu")
    module.triple = target.triple
    module.data_layout = target.data_layout
    infos: dict[str, KernelInfo] = {}
    failed: dict[str, dict] = {}
    emitted_keys: dict[tuple, KernelInfo] = {}  # identical kernels share one symbol
    light: set[str] = set()
    memo: dict[int, tuple] = {}
    for group in groups:
        saved = _snapshot(module)
        try:
            emitted, new_keys = {}, {}
            for spec in group.specs:
                # A kernel run in a loop is no small kernel where its twin outside one is.
                total = work(spec) * group.calls
                small = total < SMALL_KERNEL_WORK
                compact = total < COMPACT_KERNEL_WORK and not windowed(spec)
                key = (kernel_key(spec, memo), small, compact)
                same = emitted_keys.get(key) or new_keys.get(key)
                if same is None:
                    info = new_keys[key] = emit_spec(module, spec, target, light, small=small,
                                                     compact=compact)
                else:
                    info = replace(same, instruction_names=spec.instruction_names)
                emitted[spec.name] = info
        except UnsupportedError as e:
            _restore(module, saved)
            if group.optional:  # e.g. a sort: its thunk kind has its own runtime path
                log.info("thunk %s keeps its %s implementation: %s", group.thunk, group.opcode, e)
                continue
            failed[group.thunk] = {"opcode": group.opcode, "reason": str(e)}
            log.info("kernel %s runs on the host: %s", group.thunk, e)
            continue
        infos.update(emitted)
        emitted_keys.update(new_keys)
    return module, infos, failed, frozenset(light & set(module.globals))


# Kernels estimated below this much work (thunk_kernels.work, rough scalar operations) are
# optimized for size and without the vectorizers (llvm_split gives them scalar partitions):
# they take microseconds, where a vectorized main loop plus its remainder loops gains little,
# yet such code costs LLVM over half of its time on modules made of small kernels (compile
# time matters there: it is most of the cost). A kernel in a while loop's body or condition
# counts its work once per iteration (KernelGroup.calls): there the microseconds add up (an
# LSTM's gate kernels, 16 x 64 elements of sigmoid and tanh, 50 steps of two layers a run:
# 14 ms scalar against 8 vectorized), while a loop's scalar counters stay light.
SMALL_KERNEL_WORK = 1 << 12
# Kernels estimated below this much work (counted as for SMALL_KERNEL_WORK) are *compact*:
# their loops ask LLVM not to unroll them. Such a kernel takes a few microseconds, where an
# unrolled loop gains little (the MLP sample's dot-and-epilogue kernels, 45-60 thousand
# multiply-adds each: the same 1.3 us either way), while the unrolled copies (the vector
# loop, its remainder, a dot's contracting loop) were about a quarter of the kernel's LLVM
# time. Loops the emitter asks to unroll completely (short reductions) still are, and kernels
# with windows (thunk_kernels.windowed) are never compact.
COMPACT_KERNEL_WORK = 1 << 17


def emit_spec(module: ir.Module, spec, target, light: set[str], *,
              small: bool | None = None, compact: bool | None = None) -> KernelInfo:
    """Emit `spec`; a `small` kernel's functions (default: its work is below
    SMALL_KERNEL_WORK) are marked `optsize` (and, loop-free, their names added to `light`);
    a `compact` one's loops (default: its work is below COMPACT_KERNEL_WORK) are not
    unrolled."""
    before = set(module.globals)
    if small is None:
        small = work(spec) < SMALL_KERNEL_WORK
    if compact is None:
        compact = work(spec) < COMPACT_KERNEL_WORK and not windowed(spec)
    info = emit_kernel(module, spec, target, vectorized=not small, unroll=not compact)
    if small:
        is_light = loop_free(spec)
        for name in sorted(set(module.globals) - before):
            fn = module.globals[name]
            if isinstance(fn, ir.Function) and not fn.is_declaration:
                fn.attributes.add("optsize")
                if is_light:
                    light.add(name)
    return info


def _snapshot(module: ir.Module):
    # A kernel that fails half-way must leave nothing behind in the shared module.
    return (dict(module.globals), set(module.scope._useset), list(module.metadata),
            dict(module.namedmetadata))


def _restore(module: ir.Module, saved) -> None:
    globals_, names, metadata, named = saved
    module.globals.clear()
    module.globals.update(globals_)
    module.scope._useset.clear()
    module.scope._useset.update(names)
    module.metadata[:] = metadata
    module.namedmetadata.clear()
    module.namedmetadata.update(named)


def _kernel_entries(groups, infos) -> tuple[dict, dict]:
    """kernels.json's "kernels" (plain kernel thunks) and "composites" sections."""
    kernels, composites = {}, {}
    for group in groups:
        if group.composite is not None:
            composites[group.thunk] = composite_json(group, infos)
        else:
            spec = group.specs[0]
            kernels[group.thunk] = kernel_json(infos[spec.name], spec)
    return dict(sorted(kernels.items())), dict(sorted(composites.items()))


# ---- what an object file imports --------------------------------------------------------------

def object_imports(objects: bytes | list[bytes]) -> list[str]:
    """The global symbols ELF64 little-endian relocatable objects leave undefined and none of
    them defines: what the loader must resolve (libm functions, compiler builtins). [] for
    other object formats (the bundle validator refuses those before they are loaded)."""
    from ...bundle.elf import ElfError, read_symbols

    undefined: set[str] = set()
    defined: set[str] = set()
    try:
        for obj in [objects] if isinstance(objects, bytes) else objects:
            symbols = read_symbols(obj)
            undefined |= symbols.undefined
            defined |= symbols.defined
    except ElfError:
        return []
    return sorted(undefined - defined)
