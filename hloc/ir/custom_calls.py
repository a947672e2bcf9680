"""The custom-call targets hloc runs, by name: a fact the compiler and the runtime share.

A compile refuses a module that calls any other target (thunks/emit.py), so a bundle never
holds a call that no runtime can make; the reference interpreter implements exactly these
(runtime/interpreter/control.py and contract.py; tests/test_custom_calls.py checks the two
agree).
"""

from __future__ import annotations

import math
import re

from ..errors import InputError, UnsupportedError
from .dtypes import PrimitiveType


def lapack_targets(names: str, *prefixes: str) -> list[str]:
    """jaxlib's typed-FFI LAPACK targets: `lapack_{prefix}{name}_ffi` for each pair."""
    return [f"lapack_{p}{n}_ffi" for p in prefixes for n in names.split()]


# XLA CPU's TopK, and the LAPACK calls jaxlib lowers jnp.linalg to on CPU.
SUPPORTED_TARGETS = frozenset({
    "TopK",
    *lapack_targets("potrf trsm getrf geqrf gesdd geev gtsv", "s", "d", "c", "z"),
    *lapack_targets("orgqr syevd", "s", "d"),
    *lapack_targets("ungqr heevd", "c", "z"),
})


# The real LAPACK calls the CPU runtime runs as native jobs (runtime/cpu/hostops.py), which
# native drivers may call inside loops (codegen/cpu/driver.py).
JOB_TARGETS = frozenset(lapack_targets("potrf trsm getrf geqrf orgqr syevd", "s", "d"))


def lapack_flops(instr) -> int:
    """A LAPACK call's size, about m n min(m, n) per m x n matrix of its first operand's
    batch (n^3 for a square one; a tall QR's work grows with m n^2): what decides whether it
    runs on one BLAS thread (runtime/lapack.py), over several ranges of its batch, or
    inside a native driver."""
    dims = instr.operands[0].shape.dims
    m, n = (1, 1) if len(dims) < 2 else dims[-2:]
    return math.prod(dims[:-2]) * m * n * min(m, n)


# A batch of LAPACK calls with at least this many flops (lapack_flops) runs its matrices in
# ranges on the CPU pool's threads (runtime/cpu/hostops.split_thunk_jobs), outside native
# drivers: 256 eighs of 24 x 24 took 7.5 ms on one thread.
SPLIT_LAPACK_FLOPS = 1 << 20


def splits_over_threads(instr) -> bool:
    """Whether LAPACK call `instr` is big enough to run in ranges of its batch at once."""
    batch = instr.operands[0].shape.dims[:-2]
    return bool(batch) and batch[0] >= 2 and lapack_flops(instr) >= SPLIT_LAPACK_FLOPS


def runs_as_job(instr) -> bool:
    """Whether custom call `instr` is one the CPU runtime runs as a native job: a target of
    JOB_TARGETS on operands of its own precision."""
    target = getattr(instr.attrs, "custom_call_target", None) or ""
    if target not in JOB_TARGETS:
        return False
    want = PrimitiveType.F32 if target[len("lapack_")] == "s" else PrimitiveType.F64
    return all(op.shape.is_array and op.shape.element_type == want for op in instr.operands[:2])


# jaxlib's LAPACK options are single ASCII characters stored as ui8 in an MLIR dictionary
# backend_config, e.g. {uplo = 76 : ui8}.
def lapack_options(instr) -> dict[str, str]:
    text = instr.attrs.backend_config or ""
    return {k: chr(int(v)) for k, v in re.findall(r"(\w+)\s*=\s*(\d+)\s*:\s*ui8", text)}


def lapack_config(**options: str) -> str:
    """The backend_config jax writes for LAPACK call options (lapack_options reads it):
    lapack_config(uplo="L") == "{uplo = 76 : ui8}"."""
    return "{" + ", ".join(f"{k} = {ord(v)} : ui8" for k, v in options.items()) + "}"


def expected_dims(instr) -> list[tuple[int, ...] | None]:
    """The result dims a LAPACK call's operands and options imply (a tuple's elements in
    order; one entry for an array result; None: not written, any dims), for check_dims."""
    name = (instr.attrs.custom_call_target or "")[len("lapack_") + 1:-len("_ffi")]
    dims = [tuple(op.shape.dims) for op in instr.operands]
    if name == "gtsv":
        return dims + [dims[1][:-1]]
    batch: tuple[int, ...] = dims[0][:-2]
    m, n = dims[0][-2:]
    k = min(m, n)
    if name == "trsm":  # b solved in place; a square, of b's side
        b_dims = dims[1]
        left = lapack_options(instr).get("side", "L") == "L"
        if m != n or n != b_dims[-2 if left else -1]:
            raise ValueError("the triangular operand does not fit")
        return [tuple(_broadcast(batch, b_dims[:-2])) + b_dims[-2:]]
    simple = {"potrf": [dims[0], batch], "getrf": [dims[0], batch + (k,), batch],
              "geqrf": [dims[0], batch + (k,)], "orgqr": [dims[0]], "ungqr": [dims[0]],
              "syevd": [dims[0], batch + (n,), batch], "heevd": [dims[0], batch + (n,), batch]}
    if name in simple:
        if name in ("potrf", "syevd", "heevd") and m != n:
            raise ValueError("not square")
        return simple[name]
    if name == "gesdd":
        mode = lapack_options(instr).get("mode", "A")
        u, vt = {"A": ((m, m), (n, n)), "S": ((m, k), (k, n))}.get(mode, (None, None))
        return [dims[0], batch + (k,), u and batch + u, vt and batch + vt, batch]
    o = lapack_options(instr)  # geev
    vl = batch + (n, n) if o.get("compute_left", "N") == "V" else None
    vr = batch + (n, n) if o.get("compute_right", "N") == "V" else None
    values = [batch + (n,)] * (2 if len(instr.shape.tuple_shapes) == 5 else 1)
    return values + [vl, vr, batch]


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast of two batch shapes; ValueError where they do not broadcast."""
    import numpy as np

    return tuple(np.broadcast_shapes(a, b))


def check_dims(instr) -> None:
    """InputError unless the call's results have the dims its operands imply: LAPACK writes
    them through raw pointers, so a module that says otherwise must not reach it."""
    target = instr.attrs.custom_call_target
    got = [tuple(s.dims) for s in instr.shape.tuple_shapes] if instr.shape.is_tuple \
        else [tuple(instr.shape.dims)]
    try:
        want = expected_dims(instr)
    except (ValueError, IndexError):  # too few operands, of too low a rank, or unfit
        raise InputError(f"%{instr.name}: {target} cannot take operands "
                         f"{[list(op.shape.dims) for op in instr.operands]}") from None
    square = "geev" not in target or instr.operands[0].shape.dims[-1:] == \
        instr.operands[0].shape.dims[-2:-1]
    if len(got) != len(want) or not square or any(
            w is not None and g != w for g, w in zip(got, want, strict=False)):
        raise InputError(f"%{instr.name}: {target} with operands "
                         f"{[list(op.shape.dims) for op in instr.operands]} cannot have results "
                         f"{[list(g) for g in got]}")


_SHAPE_CHECKED = frozenset(t for t in SUPPORTED_TARGETS if t.startswith("lapack_"))


def check_call(instr) -> None:
    """Refuse a custom call no runtime can make, or a LAPACK call whose results do not fit
    its operands (before a bundle is written, as well as before the call runs)."""
    target = instr.attrs.custom_call_target or ""
    if target not in SUPPORTED_TARGETS:
        raise UnsupportedError(f"custom-call %{instr.name}: unsupported target {target!r} "
                               f"(`hloc ops` lists the targets hloc runs)")
    if target in _SHAPE_CHECKED:
        check_dims(instr)
