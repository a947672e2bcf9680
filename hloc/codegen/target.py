"""Target facts for code generation: triple, CPU, features, data layout, vector width.

A `CpuTarget` is a frozen value: everything the kernel emitters and the object-code step need
to know about the machine the code will run on. `host_target()` describes this machine;
`cpu_target(cpu, features)` parses the `--cpu` / `--cpu-features` flags for cross-compiling.
`enter_flush_to_zero` / `leave_flush_to_zero` emit the x86 denormal mode every native entry
point (CPU kernels, the emulated CUDA launcher) runs under.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, TypeAlias

from llvmlite import ir

from ..errors import InputError
from ..util.record import dataclass

if TYPE_CHECKING:
    from .cuda.target import CudaTarget

# Feature sets of the x86-64 micro-architecture levels (psABI). LLVM knows these names as CPUs,
# but llvmlite cannot list the features a CPU name implies, and bundles must record them.
_X86_V1 = ("cx8", "cmov", "fxsr", "mmx", "sse", "sse2")
_X86_V2 = _X86_V1 + ("cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3")
_X86_V3 = _X86_V2 + ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_X86_V4 = _X86_V3 + ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl")
X86_LEVELS: dict[str, tuple[str, ...]] = {
    "x86-64": _X86_V1, "x86-64-v2": _X86_V2, "x86-64-v3": _X86_V3, "x86-64-v4": _X86_V4,
}

# What each x86 vector feature needs (LLVM's X86.td "implies" edges). LLVM turns a feature on
# with everything it needs and off with everything that needs it; recorded features must do the
# same, or a bundle built with `-avx512f` would still demand avx512bw/vl/... from the host.
_X86_NEEDS: dict[str, tuple[str, ...]] = {
    "sse2": ("sse",), "sse3": ("sse2",), "ssse3": ("sse3",), "sse4.1": ("ssse3",),
    "sse4.2": ("sse4.1",), "avx": ("sse4.2",), "avx2": ("avx",), "fma": ("avx",),
    "f16c": ("avx",), "aes": ("sse2",), "pclmul": ("sse2",), "sha": ("sse2",),
    "gfni": ("sse2",), "vaes": ("aes", "avx"), "vpclmulqdq": ("avx", "pclmul"),
    "avxvnni": ("avx2",), "avxifma": ("avx2",), "avxvnniint8": ("avx2",),
    "avx512f": ("avx2", "fma", "f16c"), "avx512bw": ("avx512f",), "avx512cd": ("avx512f",),
    "avx512dq": ("avx512f",), "avx512vl": ("avx512f",), "avx512ifma": ("avx512f",),
    "avx512vpopcntdq": ("avx512f",), "avx512vnni": ("avx512f",), "avx512vbmi": ("avx512bw",),
    "avx512vbmi2": ("avx512bw",), "avx512bitalg": ("avx512bw",), "avx512bf16": ("avx512bw",),
    "avx512fp16": ("avx512bw", "avx512dq", "avx512vl"), "avx512vp2intersect": ("avx512f",),
}


def _x86_implications(settings: dict[str, str]) -> dict[str, str]:
    """Close '+'/'-' settings under _X86_NEEDS: off spreads to what needs it, on to its needs."""
    off = {f for f, sign in settings.items() if sign == "-"}
    grew = True
    while grew:
        grown = {f for f, needs in _X86_NEEDS.items() if f not in off and off.intersection(needs)}
        off |= grown
        grew = bool(grown)
    on = {f for f, sign in settings.items() if sign == "+" and f not in off}
    todo = list(on)
    while todo:
        for need in _X86_NEEDS.get(todo.pop(), ()):
            if need not in on and need not in off:
                on.add(need)
                todo.append(need)
    return {**settings, **{f: "-" for f in off}, **{f: "+" for f in on}}


@dataclass(frozen=True)
class CpuTarget:
    """A CPU code-generation target.

    `features` is LLVM's feature string ("+avx2,+fma,-avx512f"), normalized (sorted, no
    duplicates); `required_features` are the features the generated code may use, which a
    runtime must find on the host before running the code.
    """

    triple: str
    cpu: str
    features: str
    data_layout: str
    vector_bits: int  # width of the widest vector register the code may use
    kind: str = "cpu"

    @property
    def required_features(self) -> tuple[str, ...]:
        return tuple(f[1:] for f in self.features.split(",") if f.startswith("+"))

    def has(self, feature: str) -> bool:
        return feature in self.required_features

    @property
    def is_x86(self) -> bool:
        return self.triple.startswith(("x86_64", "i386", "i686"))

    @property
    def vector_registers(self) -> int:
        """How many vector registers the code may use: 32 zmm with AVX-512, 16 xmm/ymm on
        other x86-64 targets, 32 on AArch64 and the others (NEON, RVV)."""
        if self.is_x86 and not self.has("avx512f"):
            return 16
        return 32

    def lanes(self, element_bits: int) -> int:
        """How many elements of `element_bits` fit one vector register."""
        return max(1, self.vector_bits // max(8, element_bits))

    def describe(self) -> dict:
        """A JSON-ready summary (for bundle manifests and dumps)."""
        return {"triple": self.triple, "cpu": self.cpu, "features": list(self.required_features),
                "data_layout": self.data_layout, "vector_bits": self.vector_bits}


# The machine a function is emitted for (EmitContext.target).
Target: TypeAlias = "CpuTarget | CudaTarget"


def normalize_features(text: str, *, x86: bool = False) -> str:
    """'+a,-b,+a' → '+a,-b': validate each entry and sort them (the last setting wins).

    With `x86`, the settings are closed under the x86 feature implications as LLVM applies
    them: '-avx512f' also turns off avx512bw/cd/dq/vl, '+avx2' also turns on avx and the SSEs.
    """
    settings: dict[str, str] = {}
    for raw in (t.strip() for t in text.split(",")):
        if not raw:
            continue
        if raw[0] not in "+-" or len(raw) < 2:
            raise InputError(f"bad CPU feature '{raw}': expected +name or -name")
        settings[raw[1:]] = raw[0]
    if x86:
        settings = _x86_implications(settings)
    return ",".join(sign + name for name, sign in sorted(settings.items()))


def _is_x86(triple: str) -> bool:
    return triple.startswith(("x86_64", "i386", "i686"))


def _vector_bits(triple: str, features: str) -> int:
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    if not triple.startswith(("x86_64", "i386", "i686")):
        return 128
    if "avx512f" in enabled:
        return 512
    if "avx" in enabled:
        return 256
    return 128


def _make(triple: str, cpu: str, features: str) -> CpuTarget:
    from . import llvm

    features = normalize_features(features, x86=_is_x86(triple))
    layout = llvm.data_layout(triple, cpu, features)
    return CpuTarget(triple, cpu, features, layout, _vector_bits(triple, features))


@functools.cache
def host_target() -> CpuTarget:
    """The machine this process runs on, with every feature it has."""
    from . import llvm

    return _make(llvm.host_triple(), llvm.host_cpu_name(), llvm.host_cpu_features())


def cpu_target(cpu: str | None = None, features: str | None = None,
               triple: str | None = None) -> CpuTarget:
    """Parse `--cpu NAME` / `--cpu-features +a,-b`; missing parts default to the host's.

    A CPU name alone implies its features: known for the x86-64 levels; for other names the
    host's features are used only when the name is the host CPU, otherwise just the explicit
    ones are recorded (LLVM still uses the CPU's full set when generating code).
    """
    from . import llvm

    host = host_target()
    triple = triple or host.triple
    if not cpu or cpu in ("native", "host"):
        if features is None and triple == host.triple:
            return host
        cpu = host.cpu
    if not llvm.known_cpu(triple, cpu):
        raise InputError(f"unknown CPU '{cpu}' for target {triple}")
    base = _implied_features(cpu, host)
    explicit = normalize_features(features or "")
    merged = normalize_features(",".join(x for x in (base, explicit) if x))
    return _make(triple, cpu, merged)


def _implied_features(cpu: str, host: CpuTarget) -> str:
    if cpu in X86_LEVELS:
        return ",".join("+" + f for f in X86_LEVELS[cpu])
    if cpu == host.cpu:
        return host.features
    return ""


# ---- x86 floating-point control -----------------------------------------------------------------

# MXCSR bits FTZ (bit 15: denormal results flush to zero) and DAZ (bit 6: denormal inputs read as
# zero). XLA CPU runs its kernels this way, so every native entry point sets both.
MXCSR_FTZ_DAZ = 0x8040


def enter_flush_to_zero(ctx) -> ir.Value:
    """Emit: save the x86 MXCSR, then set FTZ|DAZ. Returns the slot holding the saved word.

    `ctx` is an EmitContext whose builder sits in the function's entry block.
    """
    b, i32 = ctx.builder, ir.IntType(32)
    saved = b.alloca(i32)
    mode = b.alloca(i32)
    ctx.call("llvm.x86.sse.stmxcsr", [saved], ret=ir.VoidType())
    b.store(b.or_(b.load(saved, typ=i32), ir.Constant(i32, MXCSR_FTZ_DAZ)), mode)
    ctx.call("llvm.x86.sse.ldmxcsr", [mode], ret=ir.VoidType())
    return saved


def leave_flush_to_zero(ctx, saved: ir.Value) -> None:
    """Emit: restore the MXCSR word `enter_flush_to_zero` saved."""
    ctx.call("llvm.x86.sse.ldmxcsr", [saved], ret=ir.VoidType())
