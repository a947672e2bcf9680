"""libnccl through ctypes: the real NcclApi of `--device cuda` (not run in CI: no GPU there).

Finding the library (`find_nccl`), in order: $HLOC_NCCL (a path; `off` or `0`: never use
NCCL), the nvidia-nccl wheel that `hloc[cuda]` installs (site-packages/nvidia/nccl/lib/
libnccl.so.2), then the system loader (LD_LIBRARY_PATH, ldconfig). A library older than
NCCL 2.10 is not used.

Every signature below is nccl.h's (see api.py for the enum values): ncclComm_t and
cudaStream_t are pointers, counts size_t, enums and ncclResult_t int, and ncclUniqueId a
128-byte struct passed by value to ncclCommInitRank. Communicators use the default
(blocking) configuration, so a call returns once its work is enqueued on the stream.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Iterator, Mapping

from ..vendor import wheel_dirs as _wheel_dirs
from .api import (
    MIN_VERSION,
    SPLIT_VERSION,
    UNIQUE_ID_BYTES,
    DataType,
    NcclError,
    RedOp,
    version_text,
)

NCCL_ENV = "HLOC_NCCL"
OFF = ("off", "0")
_SYSTEM_NAMES = ("libnccl.so.2", "libnccl.so")


class UniqueId(ctypes.Structure):
    """ncclUniqueId: `char internal[NCCL_UNIQUE_ID_BYTES]` (bytes, NUL included)."""

    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


def nccl_disabled(env: Mapping[str, str] = os.environ) -> bool:
    """HLOC_NCCL=off (or 0): every collective host-staged, on cuda and cuda-emulated."""
    return env.get(NCCL_ENV, "").strip().lower() in OFF


def candidates(env: Mapping[str, str] = os.environ,
               wheel_dirs: Callable[[], list[str]] = _wheel_dirs) -> Iterator[str]:
    """Paths (or loader names) to try, best first."""
    for root in wheel_dirs():
        for sub in ("nccl/lib", "cu13/lib", "cu12/lib"):
            path = os.path.join(root, sub, "libnccl.so.2")
            if os.path.exists(path):
                yield path
    found = ctypes.util.find_library("nccl")
    yield from ((found,) if found else ()) + _SYSTEM_NAMES


def find_nccl(env: Mapping[str, str] = os.environ, loader: Callable = ctypes.CDLL,
              wheel_dirs: Callable[[], list[str]] = _wheel_dirs):
    """The libnccl to use, or None (not found, or HLOC_NCCL=off). A path in HLOC_NCCL must
    load: NcclError if it does not, or lacks NCCL's API."""
    chosen = env.get(NCCL_ENV, "").strip()
    if chosen.lower() in OFF:
        return None
    if chosen:
        try:
            lib = loader(chosen)
        except OSError as e:
            raise NcclError(f"{NCCL_ENV}={chosen}: cannot load it ({e})") from None
        if not hasattr(lib, "ncclCommInitRank"):
            raise NcclError(f"{NCCL_ENV}={chosen}: not a NCCL library (no ncclCommInitRank)")
        return lib
    for path in candidates(env, wheel_dirs):
        try:
            lib = loader(path)
        except OSError:
            continue
        if hasattr(lib, "ncclCommInitRank"):
            return lib
    return None


def _declare(lib) -> None:
    """argtypes/restype of every function used, as nccl.h declares them."""
    vp, i, sz, res = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int
    comm_p = ctypes.POINTER(vp)
    signatures = {
        "ncclGetVersion": [ctypes.POINTER(i)],
        "ncclGetUniqueId": [ctypes.POINTER(UniqueId)],
        "ncclCommInitRank": [comm_p, i, UniqueId, i],
        "ncclCommDestroy": [vp],
        "ncclCommAbort": [vp],
        "ncclCommGetAsyncError": [vp, ctypes.POINTER(res)],
        "ncclAllReduce": [vp, vp, sz, i, i, vp, vp],
        "ncclAllGather": [vp, vp, sz, i, vp, vp],
        "ncclReduceScatter": [vp, vp, sz, i, i, vp, vp],
        "ncclBroadcast": [vp, vp, sz, i, i, vp, vp],
        "ncclSend": [vp, sz, i, i, vp, vp],
        "ncclRecv": [vp, sz, i, i, vp, vp],
        "ncclGroupStart": [],
        "ncclGroupEnd": [],
    }
    if hasattr(lib, "ncclCommSplit"):  # the last argument is ncclConfig_t* (NULL: inherit)
        signatures["ncclCommSplit"] = [vp, i, i, comm_p, vp]
    for name, args in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    lib.ncclGetErrorString.argtypes, lib.ncclGetErrorString.restype = [res], ctypes.c_char_p
    if hasattr(lib, "ncclGetLastError"):
        lib.ncclGetLastError.argtypes, lib.ncclGetLastError.restype = [vp], ctypes.c_char_p


class Nccl:
    """NcclApi over a loaded libnccl (`find_nccl`)."""

    def __init__(self, lib):
        self.lib = lib
        _declare(lib)
        code = ctypes.c_int()
        self._ok(lib.ncclGetVersion(ctypes.byref(code)), "ncclGetVersion")
        self.version = code.value
        self.name = f"nccl {version_text(self.version)}"
        if self.version < MIN_VERSION:
            raise NcclError(f"{self.name} is too old (hloc needs NCCL 2.10 or newer)")
        self.can_split = self.version >= SPLIT_VERSION and hasattr(lib, "ncclCommSplit")

    def error_string(self, result: int) -> str:
        text = self.lib.ncclGetErrorString(result)
        return text.decode(errors="replace") if text else f"ncclResult_t {result}"

    def _ok(self, result: int, what: str, comm=None) -> None:
        if result == 0:
            return
        detail = ""
        if hasattr(self.lib, "ncclGetLastError"):
            last = self.lib.ncclGetLastError(comm)
            detail = f": {last.decode(errors='replace')}" if last else ""
        raise NcclError(f"{what} failed: {self.error_string(result)}{detail}")

    # ---- communicators -----------------------------------------------------------------------
    def get_unique_id(self) -> bytes:
        uid = UniqueId()
        self._ok(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        return bytes(uid.internal)

    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int, bootstrap=None):
        if len(unique_id) != UNIQUE_ID_BYTES:
            raise NcclError(f"a NCCL unique id has {UNIQUE_ID_BYTES} bytes, not {len(unique_id)}")
        uid = UniqueId()
        ctypes.memmove(uid.internal, unique_id, UNIQUE_ID_BYTES)
        comm = ctypes.c_void_p()
        self._ok(self.lib.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank),
                 f"ncclCommInitRank (rank {rank} of {nranks})")
        return comm

    def comm_split(self, comm, color: int, key: int):
        new = ctypes.c_void_p()
        self._ok(self.lib.ncclCommSplit(comm, color, key, ctypes.byref(new), None),
                 "ncclCommSplit", comm)
        return new if new.value else None

    def comm_destroy(self, comm) -> None:
        self._ok(self.lib.ncclCommDestroy(comm), "ncclCommDestroy")

    def comm_abort(self, comm) -> None:
        self._ok(self.lib.ncclCommAbort(comm), "ncclCommAbort")

    def comm_get_async_error(self, comm) -> int:
        err = ctypes.c_int()
        self._ok(self.lib.ncclCommGetAsyncError(comm, ctypes.byref(err)),
                 "ncclCommGetAsyncError", comm)
        return err.value

    # ---- operations (enqueued on `stream`) -------------------------------------------------
    def all_reduce(self, send, recv, count, dtype: DataType, op: RedOp, comm, stream) -> None:
        self._ok(self.lib.ncclAllReduce(send, recv, count, int(dtype), int(op), comm, stream),
                 "ncclAllReduce", comm)

    def all_gather(self, send, recv, sendcount, dtype: DataType, comm, stream) -> None:
        self._ok(self.lib.ncclAllGather(send, recv, sendcount, int(dtype), comm, stream),
                 "ncclAllGather", comm)

    def reduce_scatter(self, send, recv, recvcount, dtype: DataType, op: RedOp, comm,
                       stream) -> None:
        self._ok(self.lib.ncclReduceScatter(send, recv, recvcount, int(dtype), int(op), comm,
                                            stream), "ncclReduceScatter", comm)

    def broadcast(self, send, recv, count, dtype: DataType, root: int, comm, stream) -> None:
        self._ok(self.lib.ncclBroadcast(send, recv, count, int(dtype), root, comm, stream),
                 "ncclBroadcast", comm)

    def send(self, send, count, dtype: DataType, peer: int, comm, stream) -> None:
        self._ok(self.lib.ncclSend(send, count, int(dtype), peer, comm, stream), "ncclSend", comm)

    def recv(self, recv, count, dtype: DataType, peer: int, comm, stream) -> None:
        self._ok(self.lib.ncclRecv(recv, count, int(dtype), peer, comm, stream), "ncclRecv", comm)

    def group_start(self) -> None:
        self._ok(self.lib.ncclGroupStart(), "ncclGroupStart")

    def group_end(self) -> None:
        self._ok(self.lib.ncclGroupEnd(), "ncclGroupEnd")
