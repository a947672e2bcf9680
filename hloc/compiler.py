"""The compile driver: model file → stages → bundle. `hloc.compile()` is the public entry.

`compile_model` loads a file and hands the module to `compile_module`, the one path to a
bundle (the CLI and the test harnesses use it): passes → plan (hloc.plan) → code generation →
hloc.bundle.assemble. Each stage's output can be dumped and the run can stop after any of them
(`--stop-after`).
"""

from __future__ import annotations

import hashlib
from dataclasses import field
from typing import TYPE_CHECKING

from .errors import InputError
from .util.log import get_logger
from .util.record import dataclass

if TYPE_CHECKING:  # imported where used: a compile-cache hit needs neither
    from .dump import DumpManager, DumpOptions
    from .ir import Module

log = get_logger("hloc.compiler")

TARGETS = ("cpu", "cuda", "interpreter")
STAGES = ("passes", "schedule", "buffers", "thunks", "llvm", "code")


@dataclass(frozen=True)
class CompileOptions:
    """Everything that influences the produced bundle (recorded in its manifest)."""

    target: str = "cpu"
    cuda_archs: tuple[str, ...] = ("sm_80",)
    cpu: str | None = None
    cpu_features: str | None = None
    opt_level: int = 2
    passes: str | None = None
    disabled_passes: tuple[str, ...] = ()
    pipeline_file: str | None = None
    stop_after: str | None = None
    verify_each_pass: bool = False

    def manifest_flags(self) -> list[str]:
        """A canonical, path-free description of the options (deterministic bundles)."""
        flags = [f"--target={self.target}", f"-O{self.opt_level}"]
        if self.target == "cuda":
            flags += [f"--cuda-arch={a}" for a in self.cuda_archs]
        if self.cpu:
            flags.append(f"--cpu={self.cpu}")
        if self.cpu_features:
            flags.append(f"--cpu-features={self.cpu_features}")
        if self.passes is not None:
            flags.append(f"--passes={self.passes}")
        flags += [f"--disable-pass={p}" for p in sorted(self.disabled_passes)]
        return flags


@dataclass
class CompileResult:
    """What a compile produced: the bundle contents plus diagnostics."""

    module: Module
    manifest: dict
    members: dict[str, bytes]
    pass_timing_table: str = ""
    passes_run: list[str] = field(default_factory=list)
    stopped_after: str | None = None


def read_file(path: str, what: str) -> bytes:
    """Read a whole input file; a clean InputError for every OS-level failure."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except IsADirectoryError:
        raise InputError(f"{what} is a directory, not a file", path) from None
    except FileNotFoundError:
        raise InputError(f"no such {what} file", path) from None
    except OSError as e:
        raise InputError(f"cannot read {what}: {e.strerror}", path) from None


def build_pipeline(options: CompileOptions):
    from .passes.pipeline_file import load_pipeline_file
    from .passes.pipelines import default_pipeline
    from .passes.spec import parse_spec

    if options.pipeline_file and options.passes is not None:
        raise InputError("--passes and --pipeline are mutually exclusive")
    if options.pipeline_file:
        return load_pipeline_file(options.pipeline_file)
    if options.passes is not None:
        return parse_spec(options.passes)
    return default_pipeline(options.target, options.opt_level)


def run_passes(module: Module, options: CompileOptions, dump: DumpManager | None):
    from .passes.pipeline import PassRunner
    from .passes.pipelines import check_disabled

    runner = PassRunner(build_pipeline(options), verify=options.verify_each_pass,
                        disabled=check_disabled(options.disabled_passes), dump=dump)
    runner.run(module)
    return runner


def _check_target(options: CompileOptions) -> None:
    if options.target not in TARGETS:
        raise InputError(f"unknown target '{options.target}' (choose from {', '.join(TARGETS)})")
    if options.stop_after is not None and options.stop_after not in STAGES:
        raise InputError(f"unknown --stop-after stage '{options.stop_after}' "
                         f"(choose from {', '.join(STAGES)})")


def _backend_stage(module: Module, plan, options: CompileOptions, dump: DumpManager | None):
    """Code generation for the target."""
    from .bundle.assemble import CodeOutput

    if options.target == "interpreter":
        return CodeOutput({}, {"kind": "interpreter"}, [])
    if options.target == "cpu":
        return _cpu_stage(module, plan, options, dump)
    from .codegen.cuda.compile import compile_cuda

    members, extra = compile_cuda(module, plan, options)
    if dump:
        for name, data in sorted(members.items()):
            if name.endswith((".ll", ".ptx", ".txt")):
                dump.artifact(name.rsplit(".", 1)[0], name.rsplit(".", 1)[1], data, stage="code")
    return CodeOutput(members, {"kind": "cuda", **extra.get("target", {})},
                      list(extra.get("notes", [])))


def _cpu_stage(module: Module, plan, options: CompileOptions, dump: DumpManager | None):
    from .bundle.assemble import CodeOutput
    from .codegen.cpu.compile import compile_cpu
    from .codegen.target import cpu_target

    target = cpu_target(options.cpu, options.cpu_features)
    art = compile_cpu(module, plan, target, options.opt_level, assembly=dump is not None)
    members = dict(art.members)
    members.pop("module.s", None)  # assembly goes to dumps only: bundles don't depend on --dump-dir
    notes = [f"thunk {name} runs on the host reference implementation: {why}"
             for name, why in sorted(art.fallbacks.items())]
    if dump:
        for label, ext, data in art.dumps:
            dump.artifact(label, ext, data, stage="code")
    return CodeOutput(members, dict(art.target_manifest), notes)


def _dump_plan(dump: DumpManager | None, module: Module, planned) -> None:
    if not dump:
        return
    dump.module("after_scheduling", module, stage="schedule")
    for name, blob in sorted(planned.members().items()):
        if name.endswith(".txt"):
            dump.artifact(name.rsplit(".", 1)[0], "txt", blob, stage="buffers")


def compile_module(module: Module, options: CompileOptions, *, source=None,
                   dump: DumpManager | None = None, progress=None,
                   cache_key: str | None = None) -> CompileResult:
    """Compile a loaded `module` (changed in place) into bundle contents.

    Stages: passes → plan (schedule, buffers, thunks: hloc.plan) → llvm/code (per target) →
    assemble_bundle. `source` (a hloc.bundle.assemble.Source) describes the input for the
    manifest; without it the module's own proto, before the passes, is the input.
    `options.stop_after` ends the run after a stage (no bundle). `cache_key` is the compile
    cache's key of the module before its passes (computed here unless given).
    """
    from .bundle.assemble import Source, assemble_bundle
    from .collectives import check_collectives
    from .frontend.load import LoadedModel
    from .ir.verifier import verify
    from .plan import plan as make_plan

    _check_target(options)
    progress = progress or (lambda stage: None)
    source = source or Source.of_module(module)
    cache_key = _cache_key(LoadedModel(module, source.form, source.arguments or None), options,
                           cache_key)
    progress("passes")
    runner = run_passes(module, options, dump)
    verify(module)
    if dump:
        dump.module("after_optimizations", module, stage="passes")
    result = CompileResult(module, {}, {}, runner.timing_table(), runner.ran)
    if options.stop_after == "passes":
        result.stopped_after = "passes"
        return result
    progress("schedule, buffers, thunks")
    check_collectives(module)
    planned = make_plan(module, target=options.target)
    _dump_plan(dump, module, planned)
    if options.stop_after in ("schedule", "buffers", "thunks"):
        result.stopped_after = options.stop_after
        return result
    progress(f"code generation ({options.target})")
    code = _backend_stage(module, planned, options, dump)
    if options.stop_after in ("llvm", "code"):
        result.stopped_after = options.stop_after
        return result
    result.manifest, result.members = assemble_bundle(
        module, planned, code, options=options, passes=runner.ran, source=source,
        cache_key=cache_key)
    return result


def input_section(data: bytes, form: str, module_name: str) -> dict:
    """The manifest's `input`: the model file's digest and form, and the module's name."""
    return {"sha256": hashlib.sha256(data).hexdigest(), "form": form,
            "module_name": module_name}


def _cache_key(loaded, options: CompileOptions, key: str | None) -> str:
    """The compile-cache key recorded in the manifest (computed unless the caller has it)."""
    if key is not None:
        return key
    from .cached_compile import compile_key

    return compile_key(loaded, options)


def compile_model(path: str, options: CompileOptions, *, dump_options: DumpOptions | None = None,
                  data: bytes | None = None, progress=None, loaded=None,
                  key: str | None = None) -> CompileResult:
    """Compile the model file at `path` (any input form) into bundle contents: the frontend,
    then compile_module. `data` (the file's bytes), `loaded` (the file already loaded from
    them) and `key` (its compile-cache key) save the compile cache's caller doing that work
    twice."""
    from .bundle.assemble import Source
    from .collectives import check_partitioned
    from .dump import DumpManager
    from .frontend import load_bytes
    from .ir.verifier import verify

    _check_target(options)
    progress = progress or (lambda stage: None)
    progress("loading")
    data = read_file(path, "model") if data is None else data
    loaded = load_bytes(data, path) if loaded is None else loaded
    module = loaded.module
    verify(module)
    check_partitioned(module, path)
    key = _cache_key(loaded, options, key)
    dump = DumpManager(dump_options, module.name) if dump_options else None
    try:
        if dump:
            dump.module("before_optimizations", module, stage="frontend")
        source = Source.of_bytes(data, loaded.form, loaded.arguments or ())
        return compile_module(module, options, source=source, dump=dump, progress=progress,
                              cache_key=key)
    finally:
        if dump:
            dump.finish()


def compile(path: str, output: str, options: CompileOptions | None = None,
            dump_options: DumpOptions | None = None) -> CompileResult:
    """Compile `path` and write the bundle to `output` atomically."""
    from .bundle import write_bundle

    result = compile_model(path, options or CompileOptions(), dump_options=dump_options)
    write_bundle(output, manifest=result.manifest, members=result.members)
    return result
