"""Checks before any byte of a CPU bundle's object code is loaded.

Running code that uses an instruction the host lacks dies of SIGILL, and MCJIT aborts the
process on a symbol it cannot resolve: both must be clear InputErrors instead, raised before
the object reaches LLVM.
"""

from __future__ import annotations

import ctypes.util
import functools

import llvmlite.binding as llvm_binding

from ...codegen import llvm
from ...errors import InputError


@functools.cache
def host_features() -> frozenset[str]:
    """The CPU features this host has (LLVM names)."""
    return frozenset(f[1:] for f in llvm.host_cpu_features().split(",") if f.startswith("+"))


def _arch(triple: str) -> str:
    arch = triple.split("-", 1)[0]
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)


def check_target(target: dict, path: str | None = None) -> None:
    """The bundle's target section against this host: architecture, then every feature."""
    triple = target.get("triple")
    host = llvm.host_triple()
    if triple and _arch(triple) != _arch(host):
        raise InputError(f"bundle was compiled for {triple} and cannot run on this {host} host",
                         path)
    needed = set(target.get("cpu_features") or ())
    missing = sorted(needed - host_features())
    if missing:
        raise InputError(f"bundle needs CPU features this host lacks: {', '.join(missing)} "
                         f"(recompile with --cpu/--cpu-features for this machine)", path)


@functools.cache
def _load_libm() -> None:
    name = ctypes.util.find_library("m")
    if name:
        try:
            llvm_binding.load_library_permanently(name)
        except RuntimeError:
            pass  # the process usually has libm already


def check_imports(names: list[str], path: str | None = None) -> None:
    """Every symbol the object imports must resolve in this process (libm is loaded)."""
    from ..limits import provide_runtime_symbols

    llvm.initialize()
    provide_runtime_symbols()
    _load_libm()
    missing = [n for n in names if not llvm_binding.address_of_symbol(n)]
    if missing:
        raise InputError(f"bundle code needs symbols this host does not provide: "
                         f"{', '.join(missing)}", path)
