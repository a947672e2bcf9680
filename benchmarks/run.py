"""`make bench`: run every benchmarks/bench_*.py in turn, each printing its own table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    only = sys.argv[1:]
    env = dict(os.environ, PYTHONPATH=str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    status = 0
    for script in sorted(HERE.glob("bench_*.py")):
        if only and not any(o in script.stem for o in only):
            continue
        print(f"\n### {script.stem}", flush=True)
        status |= subprocess.call([sys.executable, str(script)], env=env)
    return status


if __name__ == "__main__":
    sys.exit(main())
