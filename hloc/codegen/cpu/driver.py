"""Native drivers: runs of small thunks (and whole loops) executed by one generated function.

Calling a kernel from Python costs about half a microsecond; a while loop whose body is four
small kernels pays that four times per iteration, where XLA pays nothing. A *driver* is a
function `void hloc_drv_N(i8** table)` that performs a run of consecutive thunks of one
sequence natively: kernel calls over all their units, copies (memcpy), memsets, small f32
products (a call of the runtime's `hloc_gemm_list` on the job the runtime prepared for that
thunk: one product list, or pieces shared with its native thread pool, see
runtime/cpu/gemm.py), composites whose steps are all of those kinds (a dot with its
epilogue: a scan RNN's step), and while / conditional / sequential thunks whose nested
thunks are all of that kind.

The table holds, per *slot*, a kernel's pointer array (["buffers", thunk name]), the
address of a slice (["slice", [allocation, offset, size]]), a Gemm thunk's job (["gemm",
thunk name]), a LAPACK call's job (["host", thunk name]), a big kernel's job (["kernel_job",
thunk name]) or a composite step's pointer array or job (["step", [thunk name, index]]); the
runtime builds it at load time, and runs a driver's thunks one by one instead where it
cannot prepare a job (no native GEMM on the host, no such routine in its LAPACK). Kernels
of DRIVER_MAX_WORK or more that can be split (several units) run as jobs of the runtime's
native thread pool: the job's words name the pool, the kernel, its pointer array and its
units, and the driver calls `hloc_kernel_list` on them, or the kernel itself over all its
units where the job names no pool (a process of one thread). Without a native GEMM (and so
without its pool) but with several threads, such a driver's thunks run one by one, the
kernel split across Python's threads. Other host thunks never go into drivers.

A native loop cannot see Python's signal handlers, so every while loop polls the runtime's
stop flag (`hloc_stop_flag`, an i32 the runtime provides and sets on Ctrl-C or --timeout) once
per iteration and returns early when it is set; the runtime then raises (runtime/limits.py).
"""

from __future__ import annotations

import math
from dataclasses import field

from llvmlite import ir

from ...ir import PrimitiveType
from ...ir.custom_calls import lapack_flops, runs_as_job, splits_over_threads
from ...util.record import dataclass
from ..elemental.types import I1, I8, I32, I64, PTR

# Kernels estimated at this many scalar operations or more run as jobs of the runtime's
# native pool (split across threads), in drivers as outside them.
DRIVER_MAX_WORK = 1 << 18
# Products of fewer flops run inside drivers (bigger ones are split across threads).
DRIVER_MAX_GEMM_FLOPS = 8000000
_CONTROL = ("while", "conditional", "sequential")
STOP_FLAG = "hloc_stop_flag"
GEMM_LIST = "hloc_gemm_list"
KERNEL_LIST = "hloc_kernel_list"  # hloc_kernel_job of the runtime's native pool
HOST_OPS = "hloc_host_ops"  # codegen/cpu/hostops.py SYMBOL, provided by the runtime


@dataclass
class DriverPlan:
    """One driver: the consecutive thunks it replaces and its table layout."""

    symbol: str
    thunks: tuple[str, ...]
    slots: list[list] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"symbol": self.symbol, "thunks": list(self.thunks), "slots": self.slots}


class _Planner:
    def __init__(self, kernels: dict[str, dict], gemms: frozenset[str],
                 composites: frozenset[str], host_jobs: frozenset[str]):
        self.kernels = kernels  # thunk name -> {"symbol", "parallel_extent", "work"}
        self.gemms = gemms
        self.composites = composites
        self.host_jobs = host_jobs
        self.plans: list[DriverPlan] = []

    def native(self, thunk) -> bool:
        kind = thunk.kind
        if thunk.name in self.composites:
            return True
        if kind == "kernel" or thunk.name in self.kernels:
            return thunk.name in self.kernels
        if kind in ("copy", "memset"):
            return True
        if kind == "gemm":
            return thunk.name in self.gemms
        if kind == "custom-call":
            return thunk.name in self.host_jobs
        if kind in _CONTROL:
            return all(self.native(t) for t in _nested(thunk))
        return False

    def sequence(self, thunks) -> None:
        run: list = []
        for thunk in list(thunks) + [None]:
            if thunk is not None and self.native(thunk):
                run.append(thunk)
                continue
            if len(run) >= 2 or any(t.kind in _CONTROL for t in run):
                self.plans.append(DriverPlan(f"hloc_drv_{len(self.plans)}",
                                             tuple(t.name for t in run)))
            run = []
            if thunk is not None and thunk.kind in _CONTROL:
                for nested in _sequences(thunk):  # not native as a whole: its parts may be
                    self.sequence(nested)


def _sequences(thunk) -> list:
    if thunk.kind == "while":
        return [thunk.condition, thunk.body]
    if thunk.kind == "conditional":
        return list(thunk.branches)
    return [thunk.thunks]


def _nested(thunk):
    for seq in _sequences(thunk):
        yield from seq


def _small_f32_product(instr) -> bool:
    """An f32 dot of fewer than DRIVER_MAX_GEMM_FLOPS (what a driver may run natively)."""
    shapes = [instr.shape, *(o.shape for o in instr.operands)]
    if any(s.element_type != PrimitiveType.F32 for s in shapes):
        return False
    d = instr.attrs.dot_dnums
    contracted = math.prod(instr.operands[0].shape.dims[i] for i in d.lhs_contracting_dimensions)
    return 2 * instr.shape.num_elements * contracted < DRIVER_MAX_GEMM_FLOPS


def driver_gemms(module, program) -> frozenset[str]:
    """The Gemm thunks a driver may run: f32 products of fewer than DRIVER_MAX_GEMM_FLOPS."""
    instructions = {i.name: i for c in module.computations for i in c.instructions}
    names = set()
    for thunk in program.walk():
        instr = instructions.get(thunk.name)
        if thunk.kind == "gemm" and instr is not None and _small_f32_product(instr):
            names.add(thunk.name)
    return frozenset(names)


def driver_composites(module, composites: dict[str, dict]) -> frozenset[str]:
    """The composites (outline.py) a driver may run: kernels below DRIVER_MAX_WORK and small
    f32 products, so a loop around a dot with its epilogue (a scan RNN's step) stays native."""
    instructions = {i.name: i for c in module.computations for i in c.instructions}

    def native(step: dict) -> bool:
        if step["kind"] == "kernel":
            return int(step["work"]) < DRIVER_MAX_WORK
        instr = instructions.get(step.get("instruction", ""))
        return step["kind"] == "gemm" and instr is not None and _small_f32_product(instr)
    return frozenset(name for name, c in composites.items() if all(map(native, c["steps"])))


def driver_host_jobs(module, program) -> frozenset[str]:
    """The LAPACK custom calls a driver may run (custom_calls.runs_as_job): those of fewer
    than DRIVER_MAX_GEMM_FLOPS (about n^3 per matrix), which run on one thread, unless their
    batch is big enough to run on several (custom_calls.splits_over_threads)."""
    instructions = {i.name: i for c in module.computations for i in c.instructions}
    names = set()
    for thunk in program.walk():
        instr = instructions.get(thunk.name)
        if thunk.kind != "custom-call" or instr is None or not runs_as_job(instr):
            continue
        if lapack_flops(instr) < DRIVER_MAX_GEMM_FLOPS and not splits_over_threads(instr):
            names.add(thunk.name)
    return frozenset(names)


def plan_drivers(program, kernels: dict[str, dict], gemms: frozenset[str] = frozenset(),
                 composites: frozenset[str] = frozenset(),
                 host_jobs: frozenset[str] = frozenset()) -> list[DriverPlan]:
    """Driver plans for every worthwhile run of native thunks in the program; `gemms` names
    the Gemm thunks (driver_gemms), `composites` the composites (driver_composites) and
    `host_jobs` the LAPACK calls (driver_host_jobs) they may include."""
    planner = _Planner(kernels, gemms, composites, host_jobs)
    planner.sequence(program.sequence)
    return planner.plans


# ---- emission ---------------------------------------------------------------------------------

class _Emitter:
    def __init__(self, module: ir.Module, fn: ir.Function, plan: DriverPlan, kernels,
                 composites):
        self.module, self.fn, self.plan, self.kernels = module, fn, plan, kernels
        self.composites = composites
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.table = fn.args[0]
        self._stop_block = None

    def slot(self, ref: list) -> ir.Value:
        self.plan.slots.append(ref)
        index = ir.Constant(I64, len(self.plan.slots) - 1)
        return self.b.load(self.b.gep(self.table, [index], inbounds=True, source_etype=PTR),
                           typ=PTR)

    def intrinsic(self, name: str, args: list[ir.Type]) -> ir.Function:
        fn = self.module.globals.get(name)
        return fn or ir.Function(self.module, ir.FunctionType(ir.VoidType(), args), name)

    def thunks(self, thunks) -> None:
        for t in thunks:
            if t.name in self.composites:
                self._composite(t)
                continue
            kind = "kernel" if t.name in self.kernels else t.kind
            getattr(self, "_" + kind.replace("-", "_"))(t)

    def _composite(self, t) -> None:
        """A composite's steps in order: kernels over all their units, products through the
        runtime's GEMM (slots ["step", [thunk, index]]: the runtime resolves scratch)."""
        for index, step in enumerate(self.composites[t.name]["steps"]):
            ref = ["step", [t.name, index]]
            if step["kind"] == "gemm":
                self.b.call(self.intrinsic(GEMM_LIST, [PTR]), [self.slot(ref)])
            elif int(step["parallel_extent"]) > 0:
                self.b.call(self.module.globals[step["symbol"]],
                            [self.slot(ref), ir.Constant(I64, 0),
                             ir.Constant(I64, int(step["parallel_extent"]))])

    def _kernel(self, t) -> None:
        meta = self.kernels[t.name]
        extent = int(meta["parallel_extent"])
        if extent == 0:
            return
        kernel, units = self.module.globals[meta["symbol"]], ir.Constant(I64, extent)
        if extent == 1 or int(meta["work"]) < DRIVER_MAX_WORK:
            self.b.call(kernel, [self.slot(["buffers", t.name]), ir.Constant(I64, 0), units])
            return
        # A job of the native pool (pool.KERNEL_JOB_WORDS: pool state, pieces, kernel,
        # pointer array, units), or the kernel itself where the job names no pool.
        b = self.b
        job = self.slot(["kernel_job", t.name])

        def word(i: int) -> ir.Value:
            return b.load(b.gep(job, [ir.Constant(I64, i)], inbounds=True, source_etype=I64),
                          typ=I64)

        with b.if_else(b.icmp_unsigned("!=", word(0), ir.Constant(I64, 0))) as (pool, alone):
            with pool:
                b.call(self.intrinsic(KERNEL_LIST, [PTR]), [job])
            with alone:
                b.call(kernel, [b.inttoptr(word(3), PTR), ir.Constant(I64, 0), units])

    def _gemm(self, t) -> None:
        products = self.slot(["gemm", t.name])
        self.b.call(self.intrinsic(GEMM_LIST, [PTR]), [products])

    def _custom_call(self, t) -> None:
        job = self.slot(["host", t.name])
        self.b.call(self.intrinsic(HOST_OPS, [PTR]), [job])

    def _copy(self, t) -> None:
        if t.source == t.destination or t.source.size == 0:
            return
        src, dst = self.slot(["slice", t.source.to_json()]), self.slot(["slice", t.destination.to_json()])
        memcpy = self.intrinsic("llvm.memcpy.p0.p0.i64", [PTR, PTR, I64, I1])
        self.b.call(memcpy, [dst, src, ir.Constant(I64, t.source.size), ir.Constant(I1, 0)])

    def _memset(self, t) -> None:
        dst = self.slot(["slice", t.destination.to_json()])
        memset = self.intrinsic("llvm.memset.p0.i64", [PTR, I8, I64, I1])
        self.b.call(memset, [dst, ir.Constant(I8, t.byte), ir.Constant(I64, t.destination.size),
                             ir.Constant(I1, 0)])

    def _sequential(self, t) -> None:
        self.thunks(t.thunks)

    def _while(self, t) -> None:
        b = self.b
        head = b.append_basic_block(f"{t.name}.cond")
        body = b.append_basic_block(f"{t.name}.body")
        done = b.append_basic_block(f"{t.name}.done")
        b.branch(head)
        b.position_at_end(head)
        self._poll_stop_flag()
        self.thunks(t.condition)
        pred = b.load(self.slot(["slice", t.predicate.to_json()]), typ=I8)
        b.cbranch(b.icmp_unsigned("!=", pred, ir.Constant(I8, 0)), body, done)
        b.position_at_end(body)
        self.thunks(t.body)
        b.branch(head)
        b.position_at_end(done)

    def _poll_stop_flag(self) -> None:
        """Return from the driver when the runtime has set the stop flag (one atomic load
        per loop iteration: cheap, and LLVM may not hoist it out of the loop)."""
        flag = self.module.globals.get(STOP_FLAG)
        if flag is None:
            flag = ir.GlobalVariable(self.module, I32, STOP_FLAG)  # external: the runtime's
        if self._stop_block is None:
            self._stop_block = self.fn.append_basic_block("stop")
            ir.IRBuilder(self._stop_block).ret_void()
        b = self.b
        stop = b.load_atomic(flag, "monotonic", 4, typ=I32)
        go = b.append_basic_block("go")
        b.cbranch(b.icmp_unsigned("!=", stop, ir.Constant(I32, 0)), self._stop_block, go)
        b.position_at_end(go)

    def _conditional(self, t) -> None:
        b = self.b
        n = len(t.branches)
        if t.selector_is_pred:
            raw = b.load(self.slot(["slice", t.selector.to_json()]), typ=I8)
            index = b.select(b.icmp_unsigned("!=", raw, ir.Constant(I8, 0)),
                             ir.Constant(I32, 0), ir.Constant(I32, 1))
        else:
            index = b.load(self.slot(["slice", t.selector.to_json()]), typ=I32)
        done = b.append_basic_block(f"{t.name}.done")
        blocks = [b.append_basic_block(f"{t.name}.b{k}") for k in range(n)]
        # Out-of-range indices run the last branch (XLA semantics): it is the default.
        switch = b.switch(index, blocks[-1])
        for k in range(n - 1):
            switch.add_case(ir.Constant(I32, k), blocks[k])
        for block, branch in zip(blocks, t.branches, strict=True):
            b.position_at_end(block)
            self.thunks(branch)
            b.branch(done)
        b.position_at_end(done)


def emit_drivers(module: ir.Module, plans: list[DriverPlan], program, kernels,
                 composites: dict[str, dict] | None = None) -> None:
    """Define every planned driver in `module` (which holds the kernels), filling the plans'
    slot lists; `composites` (kernels.json's) holds those the plans include."""
    by_name = {t.name: t for t in program.walk()}
    for plan in plans:
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), plan.symbol)
        fn.attributes.add("nounwind")
        emitter = _Emitter(module, fn, plan, kernels, composites or {})
        emitter.thunks([by_name[name] for name in plan.thunks])
        emitter.b.ret_void()
