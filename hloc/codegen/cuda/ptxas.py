"""PTX → cubin with NVIDIA's ptxas, and the per-kernel resource report of `ptxas -v`.

ptxas is found through, in order: $HLOC_PTXAS, PATH, $CUDA_HOME/bin and $CUDA_PATH/bin,
and the `nvidia-cuda-nvcc` wheel (site-packages/nvidia/cuda_nvcc/bin/ptxas). Without it a
bundle carries PTX only (the driver JIT-compiles it) and says so in a note. Errors name the
kernel whose PTX line ptxas rejected.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import field
from pathlib import Path

from ...errors import CheckFailed
from ...util.record import dataclass

# The newest PTX ISA each CUDA release's ptxas reads.
_MAX_PTX_ISA = {(11, 0): (7, 0), (11, 1): (7, 1), (11, 2): (7, 2), (11, 3): (7, 3),
                (11, 4): (7, 4), (11, 5): (7, 5), (11, 6): (7, 6), (11, 7): (7, 7),
                (11, 8): (7, 8), (12, 0): (8, 0), (12, 1): (8, 1), (12, 2): (8, 2),
                (12, 3): (8, 3), (12, 4): (8, 4), (12, 5): (8, 5), (12, 6): (8, 5),
                (12, 7): (8, 6), (12, 8): (8, 7), (12, 9): (8, 8), (13, 0): (9, 0)}


def _candidates():
    env = os.environ.get("HLOC_PTXAS")
    if env:
        yield env
    found = shutil.which("ptxas")
    if found:
        yield found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            yield os.path.join(root, "bin", "ptxas")
    for entry in sys.path:
        yield os.path.join(entry, "nvidia", "cuda_nvcc", "bin", "ptxas")


def find_ptxas() -> str | None:
    """The first executable ptxas among the places above, or None."""
    for path in _candidates():
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


@functools.cache
def ptxas_version(path: str) -> tuple[int, int] | None:
    """(major, minor) CUDA release of a ptxas binary."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    m = re.search(r"release (\d+)\.(\d+)", out.stdout + out.stderr)
    return (int(m.group(1)), int(m.group(2))) if m else None


def max_ptx_isa(path: str) -> tuple[int, int] | None:
    version = ptxas_version(path)
    if version is None:
        return None
    known = [v for v in _MAX_PTX_ISA if v <= version]
    return _MAX_PTX_ISA[max(known)] if known else None


@dataclass(frozen=True)
class KernelResources:
    """What `ptxas -v` reports for one kernel."""

    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0

    def to_json(self) -> dict:
        return {"registers": self.registers, "shared_bytes": self.shared_bytes,
                "stack_bytes": self.stack_bytes, "spill_stores": self.spill_stores,
                "spill_loads": self.spill_loads}


@dataclass(frozen=True)
class CubinResult:
    arch: str
    cubin: bytes = field(repr=False)
    kernels: dict[str, KernelResources]
    log: str = field(repr=False, default="")


def assemble(ptx: str, arch: str, ptxas: str) -> CubinResult:
    """Run `ptxas -arch=ARCH -v`; CheckFailed naming the kernel on an error."""
    with tempfile.TemporaryDirectory(prefix="hloc-ptxas-") as tmp:
        src, out = Path(tmp, "kernels.ptx"), Path(tmp, "kernels.cubin")
        src.write_text(ptx)
        try:
            proc = subprocess.run([ptxas, f"-arch={arch}", "-v", str(src), "-o", str(out)],
                                  capture_output=True, text=True, timeout=3600)
        except OSError as e:
            raise CheckFailed(f"cannot run ptxas ({ptxas}): {e.strerror}") from None
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise CheckFailed(_error_message(log, ptx, arch))
        return CubinResult(arch, out.read_bytes(), parse_resources(log), log)


_ENTRY = re.compile(r"^\.(?:visible|weak)?\s*\.entry\s+([\w$.]+)\s*\(", re.M)
_ERROR_LINE = re.compile(r"line (\d+); (?:error|fatal)\s*:\s*(.*)")


def kernel_at_line(ptx: str, line: int) -> str | None:
    """The name of the kernel whose body holds PTX line `line` (1-based)."""
    name = None
    for m in _ENTRY.finditer(ptx):
        if ptx.count("\n", 0, m.start()) + 1 > line:
            break
        name = m.group(1)
    return name


def _error_message(log: str, ptx: str, arch: str) -> str:
    for text in log.splitlines():
        m = _ERROR_LINE.search(text)
        if m:
            kernel = kernel_at_line(ptx, int(m.group(1)))
            where = f"kernel {kernel}" if kernel else f"line {m.group(1)}"
            return f"ptxas ({arch}) rejected {where}: {m.group(2).strip()}"
    first = next((t for t in log.splitlines() if t.strip()), "no output")
    return f"ptxas ({arch}) failed: {first.strip()}"


_COMPILING = re.compile(r"Compiling entry function '([^']+)' for")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_resources(log: str) -> dict[str, KernelResources]:
    """Per-kernel registers, shared memory, stack and spills from a `ptxas -v` log."""
    facts: dict[str, dict[str, int]] = {}
    current = None
    for text in log.splitlines():
        if m := _COMPILING.search(text):
            current = facts.setdefault(m.group(1), {})
            continue
        if current is None:
            continue
        if m := _STACK.search(text):
            current.update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                           spill_loads=int(m.group(3)))
        if m := _USED.search(text):
            current["registers"] = int(m.group(1))
            if s := _SMEM.search(text):
                current["shared_bytes"] = int(s.group(1))
    return {name: KernelResources(**f) for name, f in facts.items()}
