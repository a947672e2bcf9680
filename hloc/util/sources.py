"""hloc's own Python sources, listed cheaply (os only): what the compile cache's source
fingerprint and the compile server's identity are computed from."""

from __future__ import annotations

import os

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def relative(path: str) -> str:
    """`path` relative to the package (os.path.relpath, without its cost for 300 files)."""
    return path[len(PACKAGE_DIR) + 1:]


def source_files() -> list[tuple[str, os.stat_result]]:
    """Every .py file of the package with its stat, in a fixed order."""
    found = []
    for directory, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [(os.path.join(directory, f), os.stat(os.path.join(directory, f)))
                  for f in sorted(files) if f.endswith(".py")]
    return found


def stat_listing(files: list[tuple[str, os.stat_result]]) -> str:
    """The files' relative paths, sizes and modification times: changes when any source does."""
    return repr([(relative(p), s.st_size, s.st_mtime_ns) for p, s in files])
