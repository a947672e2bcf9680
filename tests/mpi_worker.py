"""Run under mpiexec by tests/test_mpi.py: every bundle given, in both reduction modes, as the
ranks of one job (one process start for many runs). Rank 0 writes OUT/NAME.MODE.npz."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from hloc.bundle import read_bundle
from hloc.runtime.ranks import RankExecutable


def main(out: str, samples: str, bundles: list[str]) -> None:
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
