"""CUDA target facts: the NVPTX triple and data layout, the SM architectures, device limits.

A `CudaTarget` is what the kernel emitters and the PTX step need to know about the GPU the
code will run on. The elemental emitter sees `kind == "cuda"` and picks its per-target
lowerings from that. Limits are those every supported architecture (sm_75 and newer) shares,
so one kernel IR serves every `--cuda-arch` the bundle is built for.
"""

from __future__ import annotations

import re

from ...errors import InputError
from ...util.record import dataclass

TRIPLE = "nvptx64-nvidia-cuda"
# NVPTX's data layout for 64-bit pointers (what llvmlite's NVPTX target machine reports).
DATA_LAYOUT = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
DEFAULT_ARCH = "sm_80"
# The oldest architecture CUDA 13's ptxas still assembles for.
MIN_SM = 75
_ARCH = re.compile(r"^sm_(\d+)([a-z]?)$")


@dataclass(frozen=True)
class DeviceLimits:
    """Launch limits shared by every supported SM architecture."""

    warp_size: int = 32
    max_threads_per_block: int = 1024
    max_grid_x: int = 2**31 - 1
    max_grid_yz: int = 65535
    max_static_shared_bytes: int = 48 * 1024


@dataclass(frozen=True)
class CudaTarget:
    """A CUDA code-generation target: one or more SM architectures, one kernel IR."""

    archs: tuple[str, ...]
    triple: str = TRIPLE
    data_layout: str = DATA_LAYOUT
    limits: DeviceLimits = DeviceLimits()
    kind: str = "cuda"
    # NVIDIA float units return the canonical NaN 0x7fffffff and abs/neg canonicalize NaNs:
    # the elemental emitter picks XLA's (x86's) NaN bits itself (elemental/nanbits.py).
    canonical_nan: bool = True

    @property
    def warp_size(self) -> int:
        return self.limits.warp_size

    def describe(self) -> dict:
        """A JSON-ready summary (for bundle manifests and dumps)."""
        return {"triple": self.triple, "cuda_archs": list(self.archs),
                "data_layout": self.data_layout}


def check_arch(arch: str) -> str:
    """Validate one `--cuda-arch` value ("sm_80", "sm_90a"); InputError if malformed/too old."""
    m = _ARCH.match(arch)
    if m is None:
        raise InputError(f"bad --cuda-arch '{arch}': expected sm_XX, e.g. sm_80")
    if int(m.group(1)) < MIN_SM:
        raise InputError(f"--cuda-arch {arch} is too old: hloc supports sm_{MIN_SM} and newer")
    return arch


def cuda_target(archs=(DEFAULT_ARCH,)) -> CudaTarget:
    """The target for the given architectures (duplicates dropped, order kept)."""
    archs = tuple(dict.fromkeys(check_arch(a) for a in (archs or (DEFAULT_ARCH,))))
    return CudaTarget(archs)


def sm_number(arch: str) -> int:
    return int(_ARCH.match(arch).group(1))
