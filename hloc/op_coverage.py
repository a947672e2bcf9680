"""Which opcodes each stage implements: the op-coverage table behind `hloc ops`.

Every column is read from the registry that decides it, except the few routing facts that
live in code rather than in a table (which thunk kind an opcode becomes, which thunk kinds a
runtime implements natively, which opcodes a pass expands away, the documented host
fallbacks); those are listed here, each next to where it comes from.

A backend path says how a backend runs an opcode, in the order the backend decides:
  "no-op"      names storage only, no work at run time (thunks.emit.NO_THUNK)
  "fusion"     the kernels of its fused computation
  "thunk:KIND" a thunk kind of its own (gemm, while, ...) with a native implementation
  "segment"    a special CPU kernel segment (codegen.cpu.kernel.SPECIAL_SEGMENTS)
  "planner"    a special GPU kernel (codegen.cuda.parts.ITEM_PLANNERS)
  "elemental"  a loop kernel from the elemental emitter (codegen.elemental LOWERINGS)
  "expanded"   rewritten into other opcodes by a pass before code generation
  "custom-call" rewritten into a custom call the backend runs natively (CPU_CUSTOM_CALLS)
  "host"       no native code: the reference implementation runs on the host
  ""           unsupported
`cpu` / `cuda` are true for the native paths (all but "expanded", "host" and "").
"""

from __future__ import annotations

from dataclasses import asdict

from .ir import Opcode as O
from .util.record import dataclass

# The thunk kind thunks/emit.py gives an opcode; every other opcode becomes a Kernel thunk
# (a copy or broadcast may become a Copy or Memset thunk instead, else a kernel too).
THUNK_KINDS = {O.DOT: "gemm", O.CONVOLUTION: "convolution", O.SORT: "sort", O.FFT: "fft",
               O.CUSTOM_CALL: "custom-call", O.WHILE: "while", O.CONDITIONAL: "conditional",
               O.CALL: "sequential", O.PARTITION_ID: "device-id", O.REPLICA_ID: "device-id",
               # collectives (thunks/emit_collectives.py); async-* when they wrap one
               **{op: "collective" for op in (
                   O.ALL_REDUCE, O.ALL_REDUCE_START, O.ALL_REDUCE_DONE, O.ALL_GATHER,
                   O.ALL_GATHER_START, O.ALL_GATHER_DONE, O.REDUCE_SCATTER, O.ALL_TO_ALL,
                   O.COLLECTIVE_PERMUTE, O.COLLECTIVE_PERMUTE_START, O.COLLECTIVE_PERMUTE_DONE,
                   O.COLLECTIVE_BROADCAST, O.ASYNC_START, O.ASYNC_UPDATE, O.ASYNC_DONE)}}
# CPU thunk kinds with a native runtime (runtime/cpu: BLAS, convolution, control flow). The
# others (sort, fft, custom-call) run the reference implementation on the host unless
# codegen.cpu.thunk_kernels.NATIVE_KINDS gives the instruction a kernel.
CPU_NATIVE_THUNKS = frozenset({"gemm", "convolution", "while", "conditional", "sequential",
                               "collective", "device-id"})
# CUDA thunk kinds converted to GPU thunks of their own (codegen/cuda/build.py, fft.py); kinds
# planned as kernels (codegen.cuda.parts); any other kind (custom-call) runs on the host.
CUDA_OWN_THUNKS = frozenset({"while", "conditional", "sequential", "fft", "collective",
                             "device-id"})
CUDA_KERNEL_THUNKS = frozenset({"gemm", "convolution", "sort"})
# Rewritten into other opcodes by the expander passes of every pipeline.
EXPANDED_BY_PASSES = frozenset({O.BATCH_NORM_GRAD, O.BATCH_NORM_INFERENCE,
                                O.BATCH_NORM_TRAINING, O.RNG_BIT_GENERATOR})
# The documented CPU host fallbacks: opcodes without native CPU code, run by the reference
# implementation on the host (tests/test_cpu_runtime_ops.py checks the list is exact).
HOST_FALLBACK = frozenset({O.CHOLESKY, O.RNG, O.STOCHASTIC_CONVERT, O.GET_DIMENSION_SIZE})
# Rewritten by a pass of every CPU pipeline into a custom call with a CPU path of its own:
# triangular-solve into jax's LAPACK trsm call (a kernel up to order 128, else LAPACK).
CPU_CUSTOM_CALLS = frozenset({O.TRIANGULAR_SOLVE})

COLUMNS = ("opcode", "shape_inference", "interpreter", "cpu", "cpu_path", "host_fallback",
           "cuda", "cuda_path")
_NOT_NATIVE = ("expanded", "host", "")


@dataclass(frozen=True)
class OpCoverage:
    """One row of the table: what hloc has for one opcode."""

    opcode: str
    shape_inference: bool
    interpreter: bool
    cpu: bool
    cpu_path: str
    host_fallback: bool
    cuda: bool
    cuda_path: str

    def as_dict(self) -> dict:
        return asdict(self)


class _Registries:
    """The registries the table reads, loaded once."""

    def __init__(self):
        from .codegen.cpu.kernel import SPECIAL_SEGMENTS
        from .codegen.cpu.thunk_kernels import NATIVE_KINDS
        from .codegen.cuda.parts import ITEM_PLANNERS
        from .codegen.elemental import supported_opcodes
        from .ir.shape_inference import registered_opcodes
        from .runtime.interpreter.registry import supported_opcodes as interpreted
        from .thunks.emit import NO_THUNK

        self.shape = registered_opcodes()
        self.interpreter = interpreted()
        self.no_thunk = NO_THUNK
        self.segments = SPECIAL_SEGMENTS.keys()
        self.native_kinds = NATIVE_KINDS.keys()
        self.planners = ITEM_PLANNERS.keys()
        self.elemental = {t: supported_opcodes(t) for t in ("cpu", "cuda")}

    def fallback(self, op: O) -> str:
        if op in EXPANDED_BY_PASSES:
            return "expanded"
        return "host" if op in self.interpreter else ""

    def cpu_path(self, op: O) -> str:
        kind = THUNK_KINDS.get(op)
        if op in self.no_thunk:
            return "no-op"
        if op in CPU_CUSTOM_CALLS:
            return "custom-call"
        if op == O.FUSION:
            return "fusion"
        if kind in CPU_NATIVE_THUNKS or kind in self.native_kinds:
            return f"thunk:{kind}"
        if kind is not None:
            return self.fallback(op)
        if op in self.segments:
            return "segment"
        if op in self.elemental["cpu"]:
            return "elemental"
        return self.fallback(op)

    def cuda_path(self, op: O) -> str:
        kind = THUNK_KINDS.get(op)
        if op in self.no_thunk:
            return "no-op"
        if op == O.FUSION:
            return "fusion"
        if kind in CUDA_OWN_THUNKS:
            return f"thunk:{kind}"
        if kind is not None and kind not in CUDA_KERNEL_THUNKS:
            return self.fallback(op)
        if op in self.planners:
            return "planner"
        if op in self.elemental["cuda"]:
            return "elemental"
        return self.fallback(op)


def coverage() -> list[OpCoverage]:
    """One row per opcode, in opcode-name order."""
    reg = _Registries()
    rows = []
    for op in sorted(O, key=lambda o: o.value):
        cpu, cuda = reg.cpu_path(op), reg.cuda_path(op)
        rows.append(OpCoverage(op.value, op in reg.shape, op in reg.interpreter,
                               cpu not in _NOT_NATIVE, cpu, op in HOST_FALLBACK,
                               cuda not in _NOT_NATIVE, cuda))
    return rows


def _mark(flag: bool) -> str:
    return "yes" if flag else "-"


def _path(path: str) -> str:
    return path or "-"


def render_text(rows: list[OpCoverage]) -> str:
    """The table for a terminal, with a count per column at the end."""
    lines = [f"{'opcode':<28} {'shape':<6} {'interp':<7} {'cpu':<18} cuda"]
    for r in rows:
        lines.append(f"{r.opcode:<28} {_mark(r.shape_inference):<6} {_mark(r.interpreter):<7} "
                     f"{_path(r.cpu_path):<18} {_path(r.cuda_path)}")
    lines.append(custom_call_line())
    lines.append(summary(rows))
    return "\n".join(lines)


def summary(rows: list[OpCoverage]) -> str:
    n = len(rows)
    counts = {c: sum(getattr(r, c) for r in rows)
              for c in ("shape_inference", "interpreter", "cpu", "host_fallback", "cuda")}
    return (f"{n} opcodes: {counts['shape_inference']} with shape inference, "
            f"{counts['interpreter']} interpreted, {counts['cpu']} native on CPU "
            f"({counts['host_fallback']} documented host fallbacks), {counts['cuda']} native "
            f"on CUDA")


def custom_call_line() -> str:
    """The custom-call targets hloc runs (every other target is refused at compile time)."""
    from .ir.custom_calls import SUPPORTED_TARGETS

    return (f"custom-call targets ({len(SUPPORTED_TARGETS)}): "
            + ", ".join(sorted(SUPPORTED_TARGETS, key=lambda t: (t.startswith("lapack"), t))))


def render_markdown(rows: list[OpCoverage]) -> str:
    """docs/ops.md: the table as Markdown (regenerate with `hloc ops --markdown`)."""
    lines = ["# Opcode coverage", "",
             "Generated by `hloc ops --markdown > docs/ops.md` from the registries (see",
             "`hloc/op_coverage.py` for what each path means); a test checks it is current.", "",
             "| opcode | shape inference | interpreter | CPU | CUDA |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.opcode} | {_mark(r.shape_inference)} | {_mark(r.interpreter)} | "
                     f"{_path(r.cpu_path)} | {_path(r.cuda_path)} |")
    lines += ["", summary(rows) + ".", "", custom_call_line() + "."]
    return "\n".join(lines) + "\n"
