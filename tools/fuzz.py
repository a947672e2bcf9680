"""`make fuzz`: run the fuzz targets of tests/test_trust_fuzz.py for a bounded time.

Uses hypothesis with many more examples than the normal suite, stopping after
HLOC_FUZZ_SECONDS (default 60). atheris is not required: where it is installed, the same
targets could be driven by it, but hypothesis is the portable default.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main() -> int:
    seconds = int(os.environ.get("HLOC_FUZZ_SECONDS", "60"))
    env = dict(os.environ, HLOC_FUZZ_EXAMPLES="1000000")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "tests/test_trust_fuzz.py"]
    try:
        return subprocess.run(cmd, env=env, timeout=seconds).returncode
    except subprocess.TimeoutExpired:
        print(f"fuzz: stopped after {seconds} s without a failure")
        return 0


if __name__ == "__main__":
    sys.exit(main())
