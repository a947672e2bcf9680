"""CpuExecutable: a CPU bundle loaded for execution.

Load (once): check the host against the bundle's target (architecture, CPU features) and the
symbols the objects import, before LLVM sees them; JIT-load the objects kernels.json lists
(`cpu.o`, or one per partition of the module: `cpu.0.o`, ...) into one engine; lay out one arena
for the buffer assignment; upload constants; resolve every thunk into a ready step (native
drivers for runs of small thunks, see hloc/codegen/cpu/driver.py).
Run: copy the inputs into their parameter slices (large, suitably laid out inputs are read
in place instead), run the steps, copy the outputs out (large outputs are computed into a
fresh array that is returned as is).
"""

from __future__ import annotations

import copy
import json
import threading

import numpy as np

from ...codegen.cpu.hostops import SYMBOL as HOST_OPS
from ...errors import InputError
from ...thunks.base import walk
from ..executable import ProfileRow
from . import blas, checks, gemm
from .kernels import LoadedKernels, planned_scratch
from .memory import SCRATCH, Memory, OutputBlocks, array_view, physical_order, round_up
from .program import LoadContext, Profiler, realize


def _json_member(bundle, name: str) -> dict:
    if name not in bundle.members:
        raise InputError(f"CPU bundle has no {name} member", bundle.path)
    try:
        return json.loads(bytes(bundle.members[name]))
    except ValueError as e:
        raise InputError(f"CPU bundle member {name} is not valid JSON: {e}", bundle.path) from None


# Entry parameters at least this large are read in place from the caller's array (when its
# dtype and memory order fit) instead of being copied into the arena.
ZERO_COPY_INPUT_BYTES = 1 << 16
# Entry outputs at least this large are computed in a fresh array that is returned as is.
FRESH_OUTPUT_BYTES = 1 << 18
# Smaller outputs are copied out; those of at least this many bytes into one block per run
# from the same recycled pool (OutputBlocks). Separate arrays came from malloc, which gave
# their memory back to the system when the caller dropped them: four 192 KiB outputs
# (map_coordinates' images) took 0.26 ms a run to copy, page faults mostly, 5 us apiece in a
# recycled block.
POOLED_OUTPUT_BYTES = 1 << 12


def rebindable_allocations(program) -> tuple[frozenset[int], frozenset[int]]:
    """(parameter allocations read in place, output allocations made fresh per run)."""
    params = frozenset(a.index for a in program.allocations
                       if a.kind == "parameter" and not a.aliased_with_output
                       and not a.maybe_live_out and a.size >= ZERO_COPY_INPUT_BYTES)
    outputs = frozenset(a.index for a in program.allocations
                        if a.kind == "output" and a.size >= FRESH_OUTPUT_BYTES)
    return params, outputs


class CpuExecutable:
    """Native execution of a CPU bundle (`hloc.runtime.load(path, "cpu")`)."""

    device = "cpu"

    def __init__(self, bundle):
        from ...bundle.validate_cpu import listed_objects
        from ...codegen.cpu.compile import object_imports
        from ...codegen.llvm import JitLibrary
        from ...frontend import load_bytes
        from ...thunks import program_from_json

        self.bundle = bundle
        path = str(bundle.path)
        checks.check_target(bundle.manifest.get("target", {}), path)
        kernels = _json_member(bundle, "kernels.json")
        objects = [bytes(bundle.members[name]) for name, _ in listed_objects(kernels)
                   if name in bundle.members]
        if (kernels.get("kernels") or kernels.get("composites")) and not objects:
            raise InputError("CPU bundle lists kernels but has no object code", path)
        imports = object_imports(objects)
        for symbol in (gemm.LIST_SYMBOL, gemm.KERNEL_LIST_SYMBOL):
            if symbol in imports:
                gemm.provide_list_symbol(symbol)
        if HOST_OPS in imports:
            from .hostops import provide_symbol

            provide_symbol()
        checks.check_imports(imports, path)
        blas.prefer_avx512_kernels(checks.host_features())
        self.module = load_bytes(bytes(bundle.module_proto), f"{path}:module.pb").module
        if "thunks.json" not in bundle.members:
            raise InputError("CPU bundle has no thunks.json member", path)
        self.program = program_from_json(bytes(bundle.members["thunks.json"]))
        library = JitLibrary(objects) if objects else None
        self._library = library  # code stays mapped while the executable lives
        self._in_place, self._fresh = rebindable_allocations(self.program)
        self._kernels = kernels
        self._loaded = LoadedKernels(library)
        self._new_device()

    def sibling(self) -> CpuExecutable:
        """Another device of the same bundle: the loaded code shared, its own arena and steps
        (one per device of a multi-device run)."""
        twin = copy.copy(self)
        twin._new_device()
        return twin

    def _new_device(self) -> None:
        """The arena, the steps over it and the I/O bindings: everything a run writes."""
        kernels = self._kernels
        thunks = {v.thunk.name: v.thunk for v in walk(self.program.sequence)}
        scratch = max((c["scratch_bytes"] for name, c in kernels.get("composites", {}).items()
                       if planned_scratch(thunks[name], c) is None), default=0)
        self.memory = Memory(self.program.allocations, self._in_place | self._fresh, scratch)
        self._output_blocks = OutputBlocks()
        self._ctx = LoadContext(self.memory, self.module, kernels, self._loaded)
        self._steps = self._ctx.sequence(self.program.sequence)
        self._run = realize(self._steps)
        self._profiler: Profiler | None = None
        self._profiled = None
        self._lock = threading.Lock()
        self._bind_io()

    def _bind_io(self) -> None:
        entry = self.module.entry
        self._params = []
        for number, index, s in self.program.parameters:
            shape = entry.parameter(number).shape.subshape(index)
            self._params.append((number, s, shape, self.memory.cell(s, shape)))
        self._outputs = []
        self._pooled_bytes = 0
        seen = set()
        for i, s in self.program.outputs:
            shape = entry.root.shape.subshape(i)
            fresh = s.allocation in self._fresh and s not in seen
            seen.add(s)
            at = None  # offset in the pooled block, or None: a copy of its own
            if not fresh and shape.byte_size >= POOLED_OUTPUT_BYTES:
                at = self._pooled_bytes
                self._pooled_bytes += round_up(shape.byte_size)
            self._outputs.append((s, shape, fresh, at, self.memory.cell(s, shape)))
        for name, s in self.program.constants:
            instr = self._ctx.instruction(name)
            np.copyto(self.memory.view(s, instr.shape),
                      np.asarray(instr.literal.array, dtype=instr.shape.np_dtype).reshape(
                          instr.shape.dims))

    # ---- running ----------------------------------------------------------------------------
    def _copy_in(self, args) -> None:
        params = self.module.entry.parameters
        if len(args) != len(params):
            raise InputError(f"module {self.module.name} takes {len(params)} arguments, "
                             f"got {len(args)}")
        for number, s, shape, cell in self._params:
            arg = np.asarray(args[number])
            if arg.shape != tuple(shape.dims):
                raise InputError(f"argument {number} ({params[number].name}) has shape "
                                 f"{arg.shape}, expected {tuple(shape.dims)}")
            if arg.dtype != shape.np_dtype:
                arg = arg.astype(shape.np_dtype)
            if s.allocation in self._in_place:
                raw = _in_place_bytes(arg, shape)
                self.memory.bind(s.allocation, raw if raw is not None
                                 else self.memory.home(s.allocation))
                if raw is not None:
                    continue
            np.copyto(cell.a, arg)

    def _prepare_outputs(self) -> None:
        for allocation in self._fresh:
            self.memory.bind(allocation, self._output_blocks.take(self.memory.sizes[allocation]))

    def _copy_out(self) -> list[np.ndarray]:
        out = []
        block = self._output_blocks.take(self._pooled_bytes) if self._pooled_bytes else None
        for s, shape, fresh, at, cell in self._outputs:
            if fresh:
                raw = self.memory.bound[s.allocation][s.offset:s.offset + s.size]
                out.append(array_view(raw, shape))
            elif at is None:
                out.append(np.array(cell.a))
            else:
                copy = block[at:at + shape.byte_size].view(shape.np_dtype).reshape(shape.dims)
                np.copyto(copy, cell.a)
                out.append(copy)
        return out

    def runtime_bytes(self) -> int:
        """Memory the runtime holds for the steps beside the bundle's arena: the convolution
        workspace and GEMM packing buffer the steps share, and the composites' scratch of
        bundles that do not plan it (sized at load, the shared ones at the first run)."""
        return self._ctx.own_bytes() + self.memory.sizes[SCRATCH]

    def run(self, args) -> list[np.ndarray]:
        """Execute on one array per entry parameter; the flattened results."""
        with self._lock:
            self._copy_in(args)
            self._prepare_outputs()
            self._run()
            return self._copy_out()

    def run_profiled(self, args):
        """(outputs, [ProfileRow]) with each thunk's own time (nested thunks excluded)."""
        with self._lock:
            if self._profiled is None:
                # Per-thunk rows: thunks that native drivers run are stepped one by one here.
                self._ctx.use_drivers = False
                steps = self._ctx.sequence(self.program.sequence)
                self._ctx.use_drivers = True
                self._profiler = Profiler()
                self._profiled = realize(steps, self._profiler.wrap)
            self._profiler.reset()
            self._copy_in(args)
            self._prepare_outputs()
            self._profiled()
            rows = [ProfileRow(r.name, r.kind, r.ops, r.count, r.seconds)
                    for r in self._profiler.rows.values() if r.count]
            return self._copy_out(), rows

    def run_wrapped(self, args, wrap):
        """Run with `wrap(step, runner) -> runner` around every step (one step per thunk:
        native drivers are off), for the per-thunk tools of hloc.debug (localize, perturb,
        trace); the plain `run` is untouched."""
        with self._lock:
            self._ctx.use_drivers = False
            try:
                runner = realize(self._ctx.sequence(self.program.sequence), wrap)
            finally:
                self._ctx.use_drivers = True
            self._copy_in(args)
            self._prepare_outputs()
            runner()
            return self._copy_out()

    def describe(self) -> dict:
        """Counts of steps by kind and the arena size (for tools and tests)."""
        kinds: dict[str, int] = {}
        stack = list(self._steps)
        while stack:
            step = stack.pop()
            kinds[step.kind] = kinds.get(step.kind, 0) + 1
            for child in step.children:
                stack.extend(child)
        return {"arena_bytes": self.memory.size, "steps": dict(sorted(kinds.items())),
                "in_place_inputs": sorted(self._in_place), "fresh_outputs": sorted(self._fresh)}


def _in_place_bytes(arg: np.ndarray, shape) -> np.ndarray | None:
    """The caller's array as the parameter's bytes, if its memory order is the layout's."""
    order = physical_order(shape)
    phys = arg if order is None else arg.transpose(order)
    if not (phys.flags.c_contiguous and phys.flags.aligned):
        return None
    return phys.reshape(-1).view(np.uint8)
