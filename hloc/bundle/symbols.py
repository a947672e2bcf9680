"""The symbols a bundle's object code may import: libm, compiler-runtime helpers, the C
memory primitives LLVM emits calls to, and the symbols hloc's runtime itself provides.

Anything else (`system`, `dlopen`, `fork`, ...) is refused before the object reaches LLVM:
an object that imports it was not written by hloc.
"""

from __future__ import annotations

import re

# What the hloc runtime defines for generated code: the stop flag native loops poll
# (hloc/runtime/limits.py), the native GEMM's product-list and kernel-job entries
# (runtime/cpu/gemm.py) and the host-step jobs' interpreter (runtime/cpu/hostops.py).
RUNTIME_SYMBOLS = frozenset({"hloc_stop_flag", "hloc_gemm_list", "hloc_kernel_list",
                             "hloc_host_ops"})

# C memory primitives that LLVM lowers llvm.memcpy/memset/memmove to, and the heap calls of the
# scratch buffers long sort rows use (codegen/cpu/sort.py: one malloc per kernel call, then free).
_MEMORY = frozenset({"memcpy", "memset", "memmove", "__bzero", "bzero", "malloc", "free"})

# libm, C99/C23 names; each also with an `f` (float) and `l` (long double) suffix.
_LIBM_BASE = """
acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp10 exp2 expm1
fabs fdim floor fma fmax fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10 log1p
log2 logb lrint lround modf nan nearbyint nextafter nexttoward pow remainder remquo rint round
roundeven scalbln scalbn sin sincos sinh sqrt tan tanh tgamma trunc
""".split()
_LIBM = frozenset(n + suffix for n in _LIBM_BASE for suffix in ("", "f", "l"))
_LIBM_EXTRA = frozenset({"__sincos", "__sincosf", "__exp10", "__exp10f", "sincospi",
                         "sincospif"})

# compiler-rt / libgcc builtins: float conversions (half, bfloat, fp128), 128-bit integer
# arithmetic, soft-float helpers.
_COMPILER_RT = re.compile(
    r"^__(extend|trunc|fix|fixuns|float|floatun|floatsi|floatdi|pow|mul|div|udiv|mod|umod|"
    r"divmod|udivmod|ashl|ashr|lshr|neg|add|sub|cmp|ucmp|eq|ne|ge|gt|le|lt|unord|clz|ctz|"
    r"popcount|parity|bswap)[a-z0-9]{0,12}$")


def allowed_import(name: str) -> bool:
    """Whether generated code may import `name`."""
    return (name in _LIBM or name in _LIBM_EXTRA or name in _MEMORY
            or name in RUNTIME_SYMBOLS or bool(_COMPILER_RT.match(name)))
