"""Run under mpiexec by tests/test_mpi.py (one process start for many checks): first the
MpiCommunicator's paths with 4 ranks against hloc.collectives' pure semantics (a
non-commutative reducer, bf16, sub-groups, permute, broadcast, caller buffers, device ids
out of rank order), then every bundle given, in both reduction modes. Rank 0 writes
OUT/NAME.MODE.npz and OUT/selfcheck.ok."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from hloc.bundle import read_bundle
from hloc.collectives.mpi import MpiCommunicator, import_mpi
from hloc.collectives.reducers import Reducer, reducer_of
from hloc.ir.text.parser import parse_module
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


def main(out: str, samples: str, bundles: list[str]) -> None:
    selfcheck(out)
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
