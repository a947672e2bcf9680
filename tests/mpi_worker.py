"""Run under mpiexec by tests/test_mpi.py (one process start for many checks): first the
MpiCommunicator's paths with 4 ranks against hloc.collectives' pure semantics (a
non-commutative reducer, bf16, sub-groups, permute, broadcast, caller buffers, device ids
out of rank order), then the emulated NCCL (hloc.runtime.cuda.nccl.emulated) against NCCL's
specification, with communicators made both ways (ncclCommSplit, ncclCommInitRank), then
every bundle given, in both reduction modes. Rank 0 writes OUT/NAME.MODE.npz,
OUT/selfcheck.ok and OUT/nccl.ok."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from hloc.bundle import read_bundle
from hloc.collectives.mpi import MpiCommunicator, import_mpi
from hloc.collectives.reducers import Reducer, reducer_of
from hloc.ir.text.parser import parse_module
from hloc.runtime.cuda.nccl.api import DataType
from hloc.runtime.ranks import RankExecutable

IDS = [3, 1, 0, 2]  # rank i runs global device IDS[i]: groups are in device ids, not ranks
SUB = "HloModule m\n\nENTRY sub {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n" \
      "  ROOT s = f32[] subtract(a, b)\n}\n"


def _value(device: int, dtype=np.float32) -> np.ndarray:
    return (np.arange(8) * 0.1 + device * 1.37 + 1 / 3).astype(dtype)


def _check_reductions(comm, me: int) -> None:
    group = [2, 0, 3, 1]  # participant order differs from rank order
    sub = reducer_of(parse_module(SUB).entry)  # not a standard kind: order matters
    for reducer, dtype in ((sub, np.float32), (Reducer("add"), "bfloat16"),
                           (Reducer("add"), np.float32)):
        import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy

        want = reducer.fold([_value(d, dtype) for d in group])
        got = comm.all_reduce("r", group, me, [_value(me, dtype)], reducer)[0]
        if comm.deterministic or reducer.kind is None or dtype == "bfloat16":
            np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2)


def _check_moves(comm, me: int) -> None:
    pair = [0, 2] if me in (0, 2) else [3, 1]
    got = comm.all_to_all("a", pair, me, [_value(me) + j for j in range(2)])
    np.testing.assert_array_equal(got, [_value(d) + pair.index(me) for d in pair])
    out = np.empty((2, 8), np.float32)
    comm.all_gather("g", pair, me, [_value(me)], out=[out])
    np.testing.assert_array_equal(out, [_value(d) for d in pair])
    np.testing.assert_array_equal(comm.broadcast("b", pair, me, [_value(me)])[0],
                                  _value(pair[0]))
    domain = [1, 0, 3, 2]  # index 0 -> 1 -> 2; index 3 is no target: zeros
    got = comm.permute("p", domain, me, _value(me), [(0, 1), (1, 2)])
    position = domain.index(me)
    np.testing.assert_array_equal(got, _value(domain[position - 1]) if position in (1, 2)
                                  else np.zeros(8, np.float32))


def selfcheck(out: str) -> None:
    world = import_mpi().COMM_WORLD
    me = IDS[world.Get_rank()]
    for deterministic in (False, True):
        comm = MpiCommunicator(world, IDS, deterministic=deterministic, timeout=60)
        _check_reductions(comm, me)
        _check_moves(comm, me)
    if world.Get_rank() == 0:
        (Path(out) / "selfcheck.ok").write_text("ok\n")


class _Memory:
    """Emulated device memory: one allocation, handed out in 256-byte pieces."""

    def __init__(self, size: int = 1 << 16):
        self.arrays = {0: np.zeros(size, np.uint8)}
        self.base = {0: self.arrays[0].ctypes.data}
        self.used = 0

    def put(self, value: np.ndarray) -> int:
        """A device pointer to a copy of `value` (an empty buffer of its size)."""
        ptr = self.base[0] + self.used
        self.arrays[0][self.used:self.used + value.nbytes] = np.ascontiguousarray(
            value).view(np.uint8).reshape(-1)
        self.used += -(-value.nbytes // 256) * 256
        return ptr

    def get(self, ptr: int, like: np.ndarray) -> np.ndarray:
        offset = ptr - self.base[0]
        return self.arrays[0][offset:offset + like.nbytes].view(like.dtype).reshape(like.shape)


def _nccl_collectives(api, comm, group: tuple, me: int, mem: _Memory) -> None:
    from hloc.runtime.cuda.nccl.api import DataType, RedOp

    f32 = DataType.FLOAT32
    values = {d: _value(d) for d in group}
    send, recv = mem.put(values[me]), mem.put(np.zeros(8, np.float32))
    api.all_reduce(send, recv, 8, f32, RedOp.SUM, comm, 0)
    np.testing.assert_array_equal(mem.get(recv, values[me]),
                                  Reducer("add").fold([values[d] for d in group]))
    nan = mem.put(np.where(np.arange(8) == me, np.nan, values[me]).astype(np.float32))
    api.all_reduce(nan, recv, 8, f32, RedOp.MAX, comm, 0)  # fmaxf: a NaN loses
    got = mem.get(recv, values[me])
    assert not np.isnan(got).any(), got
    gathered = mem.put(np.zeros((len(group), 8), np.float32))
    api.all_gather(send, gathered, 8, f32, comm, 0)
    np.testing.assert_array_equal(mem.get(gathered, np.zeros((len(group), 8), np.float32)),
                                  [values[d] for d in group])
    full = mem.put(np.arange(8 * len(group), dtype=np.int32) * (me + 1))
    block = mem.put(np.zeros(8, np.int32))
    api.reduce_scatter(full, block, 8, DataType.INT32, RedOp.PROD, comm, 0)
    whole = np.prod([np.arange(8 * len(group), dtype=np.int32) * (d + 1) for d in group], axis=0)
    np.testing.assert_array_equal(mem.get(block, np.zeros(8, np.int32)),
                                  whole[8 * comm.rank:8 * comm.rank + 8])
    api.broadcast(send, recv, 32, DataType.UINT8, 1, comm, 0)
    np.testing.assert_array_equal(mem.get(recv, values[me]), values[group[1]])


def _nccl_mistakes(api, comm, mem: _Memory) -> None:
    from hloc.runtime.cuda.nccl.api import DataType, NcclError, RedOp

    buf = mem.put(np.zeros(8, np.float32))
    try:  # the ranks disagree on the operator: every one of them is told
        op = RedOp.MAX if comm.rank == 0 else RedOp.SUM
        api.all_reduce(buf, buf, 8, DataType.FLOAT32, op, comm, 0)
        raise AssertionError("mismatched all-reduce passed")
    except NcclError as e:
        assert "the ranks' calls differ" in str(e), e
    try:
        api.all_gather(buf, mem.base[0] + mem.arrays[0].size - 8, 8, DataType.FLOAT32, comm, 0)
        raise AssertionError("a buffer past the end of memory passed")
    except NcclError as e:
        assert "outside device memory" in str(e), e


def nccl_selfcheck(out: str) -> None:
    """The emulated NCCL on 4 ranks: communicators (split and init-rank) of two partitions,
    every collective against NCCL's definition, a grouped ring of sends, the checks."""
    from hloc.runtime.cuda.nccl.emulated import EmulatedNccl
    from hloc.runtime.cuda.nccl.engine import create_communicators
    from hloc.runtime.cuda.nccl.plan import WORLD

    world = import_mpi().COMM_WORLD
    transport = MpiCommunicator(world, IDS, timeout=60)
    me, rank, n = IDS[world.Get_rank()], world.Get_rank(), world.Get_size()
    partitions = [((2, 0), (3, 1)), ((1, 3, 0, 2),)]
    for can_split in (True, False):
        mem = _Memory()
        api = EmulatedNccl(transport, mem, can_split=can_split)
        comms = create_communicators(api, transport, partitions)
        for groups in partitions:
            group = next(g for g in groups if me in g)
            assert (comms[group].rank, comms[group].size) == (group.index(me), len(group))
            _nccl_collectives(api, comms[group], group, me, mem)
        ring = mem.put(np.full(4, rank, np.int64)), mem.put(np.zeros(4, np.int64))
        api.group_start()
        api.recv(ring[1], 4, DataType.INT64, (rank - 1) % n, comms[WORLD], 0)
        api.send(ring[0], 4, DataType.INT64, (rank + 1) % n, comms[WORLD], 0)
        api.group_end()
        np.testing.assert_array_equal(mem.get(ring[1], np.zeros(4, np.int64)), (rank - 1) % n)
        _nccl_mistakes(api, comms[WORLD], mem)
    if rank == 0:
        (Path(out) / "nccl.ok").write_text("ok\n")


def main(out: str, samples: str, bundles: list[str]) -> None:
    selfcheck(out)
    nccl_selfcheck(out)
    for path in bundles:
        name = Path(path).stem
        ins = np.load(Path(samples) / f"{name}.inputs.npz")
        args = [ins[f"arg{i}"] for i in range(len(ins.files))]
        for mode in ("native", "deterministic"):
            exe = RankExecutable(read_bundle(path), "interpreter",
                                 deterministic=mode == "deterministic", timeout=60)
            outs = exe.run(args if exe.is_root else None)
            if exe.is_root:
                np.savez(Path(out) / f"{name}.{mode}.npz",
                         **{f"out{i}": o for i, o in enumerate(outs)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
