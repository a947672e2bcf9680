"""The device collectives API: NCCL's C API as a Python protocol, with NCCL's enum values.

A `NcclApi` takes DEVICE pointers (ints) and a stream, exactly as NCCL's functions do, so the
code that maps HLO collectives to NCCL calls (plan.py) and issues them (engine.py) is the same
for the real library (binding.py: libnccl through ctypes, `--device cuda`) and for its model
(emulated.py: MPI moving the bytes of the emulator's memory, `--device cuda-emulated`).

Facts from NVIDIA's nccl.h (checked against NCCL's src/nccl.h.in, 2.3x, and the 2.32.3
library of the nvidia-nccl-cu13 wheel): ncclUniqueId is
a struct of NCCL_UNIQUE_ID_BYTES = 128 bytes passed BY VALUE to ncclCommInitRank;
ncclDataType_t and ncclRedOp_t are C enums (int-sized) with the values below; every function
returns ncclResult_t (0 = ncclSuccess); ncclCommSplit exists from NCCL 2.18
(NCCL_SPLIT_NOCOLOR = -1 gives no communicator); counts are size_t ELEMENTS of the datatype.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

from ..driver import CudaError

UNIQUE_ID_BYTES = 128
SPLIT_NOCOLOR = -1
# NCCL_VERSION(2, 10, 0): bf16 and every call used here (send/recv from 2.7).
MIN_VERSION = 21000
# NCCL_VERSION(2, 18, 0): ncclCommSplit.
SPLIT_VERSION = 21800


class DataType(enum.IntEnum):
    """ncclDataType_t."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT8E4M3 = 10
    FLOAT8E5M2 = 11


class RedOp(enum.IntEnum):
    """ncclRedOp_t (the built-in operators)."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


# ncclDataType_t -> NumPy dtype name (ml_dtypes for bf16 and the f8 types).
NUMPY_NAMES = {
    DataType.INT8: "int8", DataType.UINT8: "uint8", DataType.INT32: "int32",
    DataType.UINT32: "uint32", DataType.INT64: "int64", DataType.UINT64: "uint64",
    DataType.FLOAT16: "float16", DataType.FLOAT32: "float32", DataType.FLOAT64: "float64",
    DataType.BFLOAT16: "bfloat16", DataType.FLOAT8E4M3: "float8_e4m3fn",
    DataType.FLOAT8E5M2: "float8_e5m2",
}


class NcclError(CudaError):
    """A failed NCCL call (exit 2 through the CLI, like every CUDA failure)."""


def version_text(code: int) -> str:
    """NCCL_VERSION_CODE as "major.minor.patch" (X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z
    after)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


class NcclApi(Protocol):
    """NCCL's functions, one method each (names in snake case, arguments in NCCL's order).

    Communicators are opaque values; buffers are device addresses (ints); `stream` is a
    cudaStream_t value. Calls between `group_start` and `group_end` are one fused operation
    (required for the send/recv pairs of a permute or all-to-all to progress together)."""

    name: str  # for messages and reports: "nccl 2.32.3", "emulated nccl"
    can_split: bool  # ncclCommSplit is available

    def get_unique_id(self) -> bytes: ...

    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int, bootstrap: Any) -> Any:
        """ncclCommInitRank. `bootstrap` is the MPI communicator the id travelled on: NCCL
        itself bootstraps from the id and ignores it; the emulation connects through it."""

    def comm_split(self, comm: Any, color: int, key: int) -> Any | None: ...

    def comm_destroy(self, comm: Any) -> None: ...

    def comm_abort(self, comm: Any) -> None: ...

    def comm_get_async_error(self, comm: Any) -> int: ...

    def error_string(self, result: int) -> str: ...

    def all_reduce(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp,
                   comm: Any, stream: int) -> None: ...

    def all_gather(self, send: int, recv: int, sendcount: int, dtype: DataType, comm: Any,
                   stream: int) -> None: ...

    def reduce_scatter(self, send: int, recv: int, recvcount: int, dtype: DataType,
                       op: RedOp, comm: Any, stream: int) -> None: ...

    def broadcast(self, send: int, recv: int, count: int, dtype: DataType, root: int,
                  comm: Any, stream: int) -> None: ...

    def send(self, send: int, count: int, dtype: DataType, peer: int, comm: Any,
             stream: int) -> None: ...

    def recv(self, recv: int, count: int, dtype: DataType, peer: int, comm: Any,
             stream: int) -> None: ...

    def group_start(self) -> None: ...

    def group_end(self) -> None: ...
