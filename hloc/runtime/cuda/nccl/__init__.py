"""Device-side collectives for the CUDA runtimes under MPI (`hlo-run --processes N`).

- `api`: the NcclApi protocol (NCCL's C API with device pointers and a stream) and its enums
- `binding`: libnccl through ctypes, for `--device cuda` (the one part CI cannot run)
- `emulated`: a model of NCCL over MPI on the emulator's memory, for `--device cuda-emulated`
- `plan`: which Collective thunks map to which NCCL calls, and which stay host-staged
- `engine`: choosing the API, creating communicators, running the plans (`attach`)
"""

from .engine import DeviceCollectives, attach

__all__ = ["DeviceCollectives", "attach"]
