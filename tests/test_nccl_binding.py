"""libnccl through ctypes (hloc.runtime.cuda.nccl.binding): where the library is looked for,
and the calls that need no GPU (version, unique ids, error strings, a failing
ncclCommInitRank) against the real library, skipped where libnccl is absent (CI: the `cuda`
extra is not installed; locally: HLOC_NCCL=/path/to/libnccl.so.2 or the nvidia-nccl wheel).
On a GPU (marked `gpu`): a one-rank communicator all-reduces and all-gathers device memory."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.runtime.cuda.nccl.api import UNIQUE_ID_BYTES, DataType, NcclError, RedOp
from hloc.runtime.cuda.nccl.binding import Nccl, candidates, find_nccl, nccl_disabled


def test_the_library_is_looked_for_in_hloc_nccl_then_the_wheel_then_the_system(tmp_path):
    wheel = tmp_path / "nvidia"
    (wheel / "nccl" / "lib").mkdir(parents=True)
    (wheel / "nccl" / "lib" / "libnccl.so.2").write_bytes(b"")
    found = list(candidates({}, wheel_dirs=lambda: [str(wheel)]))
    assert found[0] == str(wheel / "nccl" / "lib" / "libnccl.so.2")
    assert "libnccl.so.2" in found[1:]
    tried = []

    def loader(path):
        tried.append(path)
        raise OSError("nope")

    assert find_nccl({}, loader=loader, wheel_dirs=lambda: [str(wheel)]) is None
    assert tried[0] == found[0]
    with pytest.raises(NcclError, match="HLOC_NCCL=/x/libnccl.so.2: cannot load it"):
        find_nccl({"HLOC_NCCL": "/x/libnccl.so.2"}, loader=loader)
    assert find_nccl({"HLOC_NCCL": "off"}, loader=loader) is None and nccl_disabled(
        {"HLOC_NCCL": "OFF"})


@pytest.fixture(scope="module")
def nccl() -> Nccl:
    lib = find_nccl()
    if lib is None:
        pytest.skip("libnccl not found (pip install 'hloc[cuda]' or set HLOC_NCCL)")
    return Nccl(lib)


def test_version_unique_ids_and_error_strings(nccl):
    assert nccl.name.startswith("nccl 2.") and nccl.version >= 21000
    first, second = nccl.get_unique_id(), nccl.get_unique_id()
    assert len(first) == UNIQUE_ID_BYTES and first != second
    assert "invalid argument" in nccl.error_string(4)  # ncclInvalidArgument


def test_init_rank_takes_the_id_by_value_and_reports_failures(nccl):
    """Without a GPU NCCL fails with a CUDA error, which must come back as one NcclError
    (not a crash: the 128-byte id is passed by value); with one, a 1-rank communicator."""
    try:
        comm = nccl.comm_init_rank(1, nccl.get_unique_id(), 0)
    except NcclError as e:
        assert "ncclCommInitRank (rank 0 of 1) failed: unhandled cuda error" in str(e)
        return
    assert nccl.comm_get_async_error(comm) == 0
    nccl.comm_destroy(comm)


@pytest.mark.parametrize("call, args, name", [
    ("all_reduce", (0, 0, 8, DataType.FLOAT32, RedOp.SUM), "AllReduce"),
    ("all_gather", (0, 0, 8, DataType.UINT8), "AllGather"),
    ("reduce_scatter", (0, 0, 8, DataType.INT32, RedOp.MAX), "ReduceScatter"),
    ("broadcast", (0, 0, 8, DataType.UINT8, 0), "Broadcast"),
    ("send", (0, 8, DataType.UINT8, 1), "Send"),
    ("recv", (0, 8, DataType.UINT8, 1), "Recv"),
])
def test_each_call_reaches_its_nccl_function(nccl, call, args, name):
    """A NULL communicator: NCCL's own argument check answers, naming the function (the
    symbol and the arguments before `comm` arrive where nccl.h puts them)."""
    with pytest.raises(NcclError, match=f"nccl{name} failed: invalid argument.*{name} : comm "
                                        f"argument is NULL"):
        getattr(nccl, call)(*args, None, 0)


@pytest.mark.gpu
def test_one_rank_collectives_on_device_memory(nccl):
    cu = pytest.importorskip("cuda.bindings.driver")
    from hloc.runtime.cuda.driver import CudaError, _init, check

    try:
        index = _init(cu)
    except CudaError as e:
        pytest.skip(str(e))
    context = check(cu, cu.cuDevicePrimaryCtxRetain(check(cu, cu.cuDeviceGet(index), "dev")),
                    "ctx")
    check(cu, cu.cuCtxSetCurrent(context), "ctx")
    comm = nccl.comm_init_rank(1, nccl.get_unique_id(), 0)
    host = np.arange(8, dtype=np.float32)
    send, recv = (check(cu, cu.cuMemAlloc(host.nbytes), "alloc") for _ in range(2))
    check(cu, cu.cuMemcpyHtoD(send, host, host.nbytes), "upload")
    nccl.all_reduce(int(send), int(recv), 8, DataType.FLOAT32, RedOp.SUM, comm, 0)
    nccl.group_start()
    nccl.all_gather(int(send), int(recv), 32, DataType.UINT8, comm, 0)
    nccl.group_end()
    check(cu, cu.cuCtxSynchronize(), "sync")
    out = np.empty_like(host)
    check(cu, cu.cuMemcpyDtoH(out, recv, out.nbytes), "download")
    np.testing.assert_array_equal(out, host)
    assert nccl.comm_get_async_error(comm) == 0
    nccl.comm_destroy(comm)


def test_the_api_is_chosen_per_device_and_switch(monkeypatch):
    """cuda-emulated: the emulation; cuda: libnccl when found, else host-staged and why;
    HLOC_NCCL=off: host-staged on both."""
    from types import SimpleNamespace

    from hloc.runtime.cuda.nccl import engine
    from hloc.runtime.cuda.nccl.emulated import EmulatedNccl

    exe, transport = SimpleNamespace(memory=None), SimpleNamespace(MPI=None)
    monkeypatch.delenv("HLOC_NCCL", raising=False)
    assert isinstance(engine._api("cuda-emulated", exe, transport)[0], EmulatedNccl)
    monkeypatch.setattr(engine, "find_nccl", lambda: None)
    api, why = engine._api("cuda", exe, transport)
    assert api is None and "libnccl.so.2 not found (pip install 'hloc[cuda]'" in why
    monkeypatch.setenv("HLOC_NCCL", "off")
    for device in ("cuda", "cuda-emulated"):
        assert engine._api(device, exe, transport) == (None, "HLOC_NCCL=off")
