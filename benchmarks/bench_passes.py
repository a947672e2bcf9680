"""-O2 pipeline time at growing module sizes (issue: 20k instructions under 10 s, linear growth)."""

from __future__ import annotations

import time

from synthetic import build

from hloc.compiler import CompileOptions, run_passes

SIZES = (2500, 5000, 10000, 20000)


def main() -> None:
    print("== -O2 pass pipeline (seconds) ==")
    print(f"{'instructions':>12} {'seconds':>8} {'us/instr':>9}")
    for n in SIZES:
        m = build(n)
        count = m.instruction_count()
        start = time.perf_counter()
        run_passes(m, CompileOptions(target="cpu", opt_level=2), None)
        dt = time.perf_counter() - start
        print(f"{count:>12} {dt:>8.3f} {1e6 * dt / count:>9.1f}")


if __name__ == "__main__":
    main()
