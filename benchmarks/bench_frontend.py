"""Load + verify time for large modules, from proto and from text (issue: under 2 s at 20k)."""

from __future__ import annotations

import time

from synthetic import build

from hloc.frontend import load_bytes, module_to_proto
from hloc.ir.text.printer import print_module
from hloc.ir.verifier import verify

SIZES = (2500, 5000, 10000, 20000)


def main() -> None:
    print("== load + verify (seconds) ==")
    print(f"{'instructions':>12} {'proto':>8} {'text':>8}")
    for n in SIZES:
        m = build(n)
        pb = module_to_proto(m).SerializeToString(deterministic=True)
        text = print_module(m).encode()
        row = [m.instruction_count()]
        for data in (pb, text):
            start = time.perf_counter()
            verify(load_bytes(data, "<bench>").module)
            row.append(time.perf_counter() - start)
        print(f"{row[0]:>12} {row[1]:>8.3f} {row[2]:>8.3f}")


if __name__ == "__main__":
    main()
