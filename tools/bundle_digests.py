"""Print the sha256 of the bundle each sample compiles to, per target (refactor check).

Usage: python tools/bundle_digests.py [--targets cpu,cuda] [--jobs N] > digests.txt
Two runs on trees that should behave the same must print identical lines.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _digest(job: tuple[str, str]) -> str:
    from hloc.compiler import CompileOptions, compile

    sample, target = job
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "b.bundle")
        try:
            compile(str(ROOT / "samples" / sample), out, CompileOptions(target=target))
            digest = hashlib.sha256(Path(out).read_bytes()).hexdigest()
        except Exception as e:  # noqa: BLE001 (a failure is itself a line to compare)
            digest = f"error {type(e).__name__}: {e}"
    return f"{target} {sample} {digest}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default="cpu,cuda")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", default="", help="substring filter on sample names")
    args = ap.parse_args()
    samples = sorted(p.name for p in (ROOT / "samples").iterdir()
                     if p.suffix in (".pb", ".hlo") and args.only in p.name)
    jobs = [(s, t) for t in args.targets.split(",") for s in samples]
    with ProcessPoolExecutor(args.jobs) as pool:
        for line in pool.map(_digest, jobs):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
