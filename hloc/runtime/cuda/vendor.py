"""What the vendor libraries' engines share (cuBLAS for dots: hloc.runtime.cuda.cublas; cuDNN
for convolutions: hloc.runtime.cuda.cudnn): the switch that picks the library or hloc's
kernels, where the library is looked for, and the precision configs of the instructions their
thunks run.

A switch (HLOC_CUDA_GEMM, HLOC_CUDA_CONV) is `auto` (unset or empty), `kernel` or the
library's name. `auto` uses the library whenever it sets up and says once, otherwise, that
hloc's kernels run instead; the library's name makes a missing library an error (and, on
`cuda-emulated`, runs the descriptors through the host stand-in); `kernel` never loads it.
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib.util
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

from ...errors import InputError
from ...util.record import dataclass

Lib = TypeVar("Lib")


@dataclass(frozen=True)
class Switch:
    """One vendor library's switch: `env` names the variable, `library` its forcing value."""

    env: str
    library: str
    name: str  # as printed: "cuBLAS"
    fallback: str  # what the thunks run when `auto` finds no usable library

    def mode(self, env: Mapping[str, str] = os.environ) -> str:
        """The variable as "auto", "kernel" or `library` (InputError for anything else)."""
        value = env.get(self.env, "").strip().lower() or "auto"
        if value not in ("auto", "kernel", self.library):
            raise InputError(f"{self.env}={env.get(self.env)!r}: expected 'auto', 'kernel' or "
                             f"'{self.library}'")
        return value

    def forced(self, env: Mapping[str, str] = os.environ) -> bool:
        """Whether the variable forces the library (the emulator's switch for its stand-in)."""
        return self.mode(env) == self.library

    def select(self, mode: str, has_descriptors: bool, make: Callable,
               note: Callable[[str], None]):
        """The engine `make()` builds (it raises CudaError when the library is missing or
        unusable), or None for hloc's kernels: `kernel`, or no described thunk (the library
        is not even loaded); `auto` falls back with `note(why)`; the forcing value must load."""
        from .driver import CudaError

        if mode == "kernel" or not has_descriptors:
            return None
        if mode == self.library:
            return make()
        try:
            return make()
        except CudaError as e:
            note(f"{self.name} not used, {self.fallback} instead: {e}")
            return None


def wheel_dirs() -> list[str]:
    """The nvidia namespace package's directories (where nvidia-* wheels install)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec is not None else []


def newest_first(pattern: str) -> list[str]:
    return sorted(glob.glob(pattern), reverse=True)


def library_candidates(pattern: str, wheel_subdirs: Sequence[str], home_vars: Sequence[str],
                       loader_name: str, system_names: Sequence[str],
                       env: Mapping[str, str], dirs: Callable[[], list[str]]) -> Iterator[str]:
    """Paths (or loader names) of a library to try, best first: `pattern` (e.g.
    "libcublas.so*") in NVIDIA's wheels, then under each of `home_vars`' directories, then the
    system loader's `loader_name` and `system_names`."""
    for root in dirs():
        for sub in wheel_subdirs:
            yield from newest_first(os.path.join(root, sub, pattern))
    for var in home_vars:
        home = env.get(var)
        if not home:
            continue
        for sub in ("lib64", "lib", "targets/*/lib"):
            yield from newest_first(os.path.join(home, sub, pattern))
    found = ctypes.util.find_library(loader_name)
    yield from ((found,) if found else ()) + tuple(system_names)


def load_first(paths: Iterator[str], open_lib: Callable[[str], Lib],
               usable: Callable[[Lib], bool], needs: str, library: str, wheel: str,
               switch: Switch) -> Lib:
    """The first of `paths` that `open_lib` opens and that is `usable` (has `needs`);
    CudaError naming the first failure and how to install `wheel` when none is."""
    from .driver import CudaError

    failures = []
    for path in paths:
        try:
            lib = open_lib(path)
        except OSError as e:
            if os.sep in path:  # a file we found but could not load is worth reporting
                failures.append(f"{path}: {e}")
            continue
        if usable(lib):
            return lib
        failures.append(f"{path}: no {needs}")
    why = f" ({failures[0]})" if failures else ""
    raise CudaError(f"{library} was not found{why} ({switch.env}={switch.library} needs it): "
                    f"install {wheel} (pip install 'hloc[cuda]'), set CUDA_HOME, or set "
                    f"{switch.env}=kernel")


def precisions(module, opcode: str) -> dict:
    """{thunk name: the PrecisionConfig of its `opcode` instruction}: the instruction's own
    name, and a fusion's whose fused computation holds one (its thunk is named after it)."""
    out = {}
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode.value == opcode:
                out[instr.name] = instr.attrs.precision_config
            elif instr.opcode.value == "fusion" and instr.called:
                found = [i for i in instr.called[0].instructions if i.opcode.value == opcode]
                if found:
                    out[instr.name] = found[0].attrs.precision_config
    return out
