"""Print a digest of the bundle each sample compiles to, per target (refactor check).

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


def _content_digest(path: str) -> str:
    """sha256 of the bundle's members and manifest, less the compile-cache key (it hashes
    hloc's own sources, so any edit changes it, output or not)."""
    import json

    from hloc.bundle import read_bundle

    bundle = read_bundle(path)
    manifest = json.loads(json.dumps(bundle.manifest))
    manifest.get("compiler", {}).pop("cache_key", None)
    h = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode())
    for name in sorted(bundle.members):
        h.update(name.encode() + b"\0" + bytes(bundle.members[name]))
    return h.hexdigest()


def _digest(job: tuple[str, str]) -> str:
    from hloc.compiler import CompileOptions, compile

    sample, target = job
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "b.bundle")
        try:
            compile(str(ROOT / "samples" / sample), out, CompileOptions(target=target))
            digest = _content_digest(out)
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
