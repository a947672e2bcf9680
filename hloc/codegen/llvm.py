"""All llvmlite.binding work: initialization, parse/verify, optimization, object code, JIT.

Code generation (`llvmlite.ir` construction) lives elsewhere; this module only turns LLVM IR
text into optimized IR, relocatable object code and assembly for a `CpuTarget`, and loads
object code into an MCJIT engine for the runtime and tests.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import tempfile
import threading
from collections.abc import Sequence

import llvmlite.binding as llvm

from ..errors import CheckFailed, InputError
from ..util.record import dataclass

_INIT_LOCK = threading.Lock()
_initialized = False


def initialize() -> None:
    """Initialize LLVM's native target, asm printer and parser once per process."""
    global _initialized
    with _INIT_LOCK:
        if _initialized:
            return
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()
        _initialized = True


# ---- host facts ---------------------------------------------------------------------------

def host_triple() -> str:
    initialize()
    return llvm.get_process_triple()


def host_cpu_name() -> str:
    initialize()
    return llvm.get_host_cpu_name()


def host_cpu_features() -> str:
    """The host's features as LLVM's '+a,-b' string."""
    initialize()
    return llvm.get_host_cpu_features().flatten()


@functools.cache
def data_layout(triple: str, cpu: str, features: str) -> str:
    return str(_target_machine(triple, cpu, features, 2).target_data)


@functools.cache
def known_cpu(triple: str, cpu: str) -> bool:
    """True if LLVM knows `cpu` for `triple` (it only warns on stderr about unknown names)."""
    initialize()
    module = llvm.parse_assembly(f'target triple = "{triple}"\ndefine void @f() {{ ret void }}\n')
    with _captured_stderr() as captured:
        # An unknown CPU drops the 64-bit feature too and LLVM aborts: keep it explicit.
        features = "+64bit" if triple.startswith("x86_64") else ""
        tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features,
                                                                   reloc="pic")
        tm.emit_object(module)
    return "not a recognized processor" not in captured.text()


class _captured_stderr:
    """Capture what native code writes to file descriptor 2."""

    def __enter__(self):
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)

    def text(self) -> str:
        self._file.seek(0)
        return self._file.read().decode(errors="replace")


def _target_machine(triple: str, cpu: str, features: str, opt_level: int):
    initialize()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise InputError(f"unsupported target triple '{triple}': {e}") from None
    # PIC keeps the object loadable at any address (MCJIT here, or a linker elsewhere).
    return target.create_target_machine(cpu=cpu, features=features, opt=min(opt_level, 3),
                                        reloc="pic", codemodel="small")


def target_machine(target, opt_level: int = 2):
    """An LLVM TargetMachine for a CpuTarget."""
    return _target_machine(target.triple, target.cpu, target.features, opt_level)


class _MachinePool:
    """Target machines kept for reuse, one borrower at a time each (a TargetMachine caches
    its subtargets without a lock). Creating one and its first subtarget (the X86 lowering
    tables) cost 2-3 ms of every partition's optimization and as much again of its object
    emission: a third of LLVM's time on a small module's dozen partitions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[tuple, list] = {}

    @contextlib.contextmanager
    def borrow(self, target, opt_level: int):
        key = (target.triple, target.cpu, target.features, min(opt_level, 3))
        with self._lock:
            free = self._free.setdefault(key, [])
            tm = free.pop() if free else None
        if tm is None:
            tm = target_machine(target, opt_level)
        try:
            yield tm
        finally:
            with self._lock:
                self._free[key].append(tm)


_MACHINES = _MachinePool()


# ---- IR → optimized IR → object --------------------------------------------------------------

def parse(ir_text: str):
    """Parse and verify LLVM IR text; a malformed module is an internal error (CheckFailed)."""
    initialize()
    try:
        module = llvm.parse_assembly(ir_text)
        module.verify()
    except RuntimeError as e:
        raise CheckFailed(f"invalid LLVM IR: {e}") from None
    return module


def optimize(module, target, opt_level: int = 2, *, vectorize: bool = True) -> None:
    """Run LLVM's default -O<level> pipeline (new pass manager) on `module`, in place.

    Loop and SLP vectorization are on from -O2, as in clang, unless `vectorize` is False
    (kernels too small for vector code to pay: llvm_split.Partition.scalar).
    """
    tm = target_machine(target, opt_level)
    module.triple = target.triple
    module.data_layout = target.data_layout
    pass_builder = llvm.create_pass_builder(tm, _tuning(opt_level, vectorize))
    pass_builder.getModulePassManager().run(module, pass_builder)


def _tuning(opt_level: int, vectorize: bool = True):
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    vectorize = vectorize and opt_level >= 2
    pto.loop_vectorization = vectorize
    pto.slp_vectorization = vectorize
    pto.loop_unrolling = opt_level >= 1
    return pto


def optimize_concurrently(module, target, opt_level: int = 2, *, vectorize: bool = True,
                          tm=None) -> None:
    """`optimize`, but able to run on several threads at once, each on a module of its own
    LLVM context: llvmlite serializes every call into LLVM with one global lock, which the
    (long) pass-manager run skips here. LLVM itself is thread-safe across contexts. `tm`: a
    target machine for `target` at `opt_level` this thread holds alone (default: a new one)."""
    run = _unlocked("LLVMPY_RunNewModulePassManager")
    if run is None:  # another llvmlite: stay correct, just serial
        optimize(module, target, opt_level, vectorize=vectorize)
        return
    tm = tm or target_machine(target, opt_level)
    module.triple = target.triple
    module.data_layout = target.data_layout
    pass_builder = llvm.create_pass_builder(tm, _tuning(opt_level, vectorize))
    manager = pass_builder.getModulePassManager()
    run(manager, module, pass_builder)


def _unlocked(name: str):
    """llvmlite's C function `name` without llvmlite's global lock, or None."""
    return getattr(getattr(llvm.ffi.lib, name, None), "_cfn", None)


def emit_concurrently(module, target, opt_level: int = 2, *, assembly: bool = False, tm=None):
    """Object code (or assembly text) like emit_object / emit_assembly, able to overlap with
    other LLVM work on another thread (see optimize_concurrently, `tm` as there)."""
    emit = _unlocked("LLVMPY_TargetMachineEmitToMemory")
    tm = tm or target_machine(target, opt_level)
    if emit is None:
        return tm.emit_assembly(module) if assembly else tm.emit_object(module)
    ffi = llvm.ffi
    with ffi.OutputString() as error:
        buffer = emit(tm, module, int(not assembly), error)
        if not buffer:
            raise RuntimeError(str(error))
    try:
        data = ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer),
                                ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)
    return data.decode() if assembly else data


# What small loop-free kernels (llvm_split's light partitions: codegen/cpu/thunk_kernels.py
# loop_free) get instead of the -O pipeline: inline the kernel body, promote its allocas, one
# round of instcombine and CFG cleanup. Such a kernel is one loop over at most a few thousand
# elements; the -O2 pipeline (eight rounds of instcombine, the loop passes) made it no faster
# yet was most of LLVM's time on modules made of them (math, random, dtype_zoo).
SMALL_KERNEL_PASSES = ("always_inliner", "sroa", "instruction_combine", "simplify_cfg",
                       "dead_code_elimination")


def optimize_light(module, target, tm=None) -> None:
    """SMALL_KERNEL_PASSES on `module`, in place, outside llvmlite's lock (as
    optimize_concurrently; `tm` at -O1)."""
    tm = tm or target_machine(target, 1)
    module.triple = target.triple
    module.data_layout = target.data_layout
    pass_builder = llvm.create_pass_builder(tm, _tuning(1, False))
    manager = llvm.create_new_module_pass_manager()
    for name in SMALL_KERNEL_PASSES:
        getattr(manager, f"add_{name}_pass")()
    run = _unlocked("LLVMPY_RunNewModulePassManager")
    if run is None:  # another llvmlite: stay correct, just serial
        manager.run(module, pass_builder)
    else:
        run(manager, module, pass_builder)


def compile_in_context(ir_text: str, target, opt_level: int = 2, *, vectorize: bool = True,
                       assembly: bool = False, light: bool = False) -> CompiledCode:
    """`compile_ir` in an LLVM context of its own, with the long steps (optimization, object
    and assembly emission) outside llvmlite's global lock: several run at once on threads,
    one per partition of a module (llvm_split). `vectorize`: see `optimize`. `light` (from
    -O1): SMALL_KERNEL_PASSES in place of the -O pipeline."""
    initialize()
    with _MACHINES.borrow(target, opt_level) as tm:
        try:
            module = llvm.parse_assembly(ir_text, context=llvm.create_context())
            if light and opt_level >= 1:
                with _MACHINES.borrow(target, 1) as light_tm:
                    optimize_light(module, target, light_tm)
            else:
                optimize_concurrently(module, target, opt_level, vectorize=vectorize, tm=tm)
            module.verify()
        except RuntimeError as e:
            raise CheckFailed(f"invalid LLVM IR: {e}") from None
        obj = emit_concurrently(module, target, opt_level, tm=tm)
        asm = (emit_concurrently(module, target, opt_level, assembly=True, tm=tm)
               if assembly else None)
    return CompiledCode(ir_text, str(module), obj, asm)


def emit_object(module, target, opt_level: int = 2) -> bytes:
    """Relocatable object code (ELF on Linux) for `target`."""
    return target_machine(target, opt_level).emit_object(module)


def emit_assembly(module, target, opt_level: int = 2) -> str:
    return target_machine(target, opt_level).emit_assembly(module)


@dataclass(frozen=True)
class CompiledCode:
    """What compiling one LLVM module produces (every stage, for dumps)."""

    ir: str  # before optimization
    optimized_ir: str
    object_code: bytes
    assembly: str | None = None


def compile_ir(ir_text: str, target, opt_level: int = 2, *, assembly: bool = False) -> CompiledCode:
    """Parse, verify, optimize and emit object code (and optionally assembly)."""
    module = parse(ir_text)
    module.triple = target.triple
    module.data_layout = target.data_layout
    optimize(module, target, opt_level)
    module.verify()
    obj = emit_object(module, target, opt_level)
    asm = emit_assembly(module, target, opt_level) if assembly else None
    return CompiledCode(ir_text, str(module), obj, asm)


# ---- JIT ----------------------------------------------------------------------------------------

class JitLibrary:
    """Object code loaded into an MCJIT engine; look functions up by name.

    `object_code` is one relocatable object or several (the partitions of one module,
    llvm_split): MCJIT resolves each object's undefined symbols against the others' global
    definitions first, then against the process. Keep the library alive as long as any
    function address from it is in use.
    """

    def __init__(self, object_code: bytes | Sequence[bytes], target=None):
        from ..runtime.limits import provide_runtime_symbols
        from .target import host_target

        initialize()
        provide_runtime_symbols()  # the stop flag native loops poll
        target = target or host_target()
        tm = target_machine(target, 2)
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        objects = [object_code] if isinstance(object_code, bytes) else list(object_code)
        for obj in objects:
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self._engine.finalize_object()
        self._lock = threading.Lock()

    def address(self, name: str) -> int:
        """The address of function `name`; KeyError if the object does not define it."""
        with self._lock:
            addr = self._engine.get_function_address(name)
        if not addr:
            raise KeyError(f"no function {name} in the loaded object code")
        return addr
