"""hloc's own Python sources, listed cheaply (os only): what the compile cache's source
fingerprint and the compile server's identity are computed from."""

from __future__ import annotations

import os

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def relative(path: str) -> str:
    """`path` relative to the package (os.path.relpath, without its cost for 300 files)."""
    return path[len(PACKAGE_DIR) + 1:]


def source_files(directory: str = PACKAGE_DIR) -> list[tuple[str, os.stat_result]]:
    """Every .py file of the package with its stat, in a fixed order: a directory's files by
    name, then its subdirectories' by name (os.walk's order; scandir is faster, and every
    `hloc compile` through a compile server pays for this walk)."""
    files, dirs = [], []
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            if entry.name != "__pycache__":
                dirs.append(entry.path)
        elif entry.name.endswith(".py"):
            files.append((entry.path, entry.stat()))
    found = sorted(files)
    for sub in sorted(dirs):
        found += source_files(sub)
    return found


def stat_listing(files: list[tuple[str, os.stat_result]]) -> str:
    """The files' relative paths, sizes and modification times: changes when any source does."""
    return repr([(relative(p), s.st_size, s.st_mtime_ns) for p, s in files])
