"""Writing files safely where others may have planted things: temp files created exclusively
under unpredictable names (never through a symlink), removed on error and on SIGTERM, and
`hloc inspect --extract` that never follows a symlink inside its destination.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..errors import InputError

_LIVE_TEMPS: set[str] = set()  # temp files to remove if SIGTERM arrives mid-write
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def check_output_path(path: str) -> None:
    """`-o`/`--output` must name a file: a directory there is a clean error, not exit 3."""
    if os.path.isdir(path):
        raise InputError("is a directory; give a file name to write", path=path)


def open_exclusive_temp(target: str, what: str = "cannot write") -> tuple[str, int]:
    """A new temp file next to `target` (O_EXCL, O_NOFOLLOW, random name); registered for
    SIGTERM cleanup until `forget_temp`."""
    directory = os.path.dirname(os.path.abspath(target))
    name = f".{os.path.basename(target)}.{os.getpid()}.{os.urandom(8).hex()}.tmp"
    tmp = os.path.join(directory, name)
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
    except OSError as e:
        raise InputError(f"{what}: {e.strerror or e}", path=target) from None
    _LIVE_TEMPS.add(tmp)
    return tmp, fd


def forget_temp(tmp: str, *, remove: bool) -> None:
    _LIVE_TEMPS.discard(tmp)
    if remove:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def safe_writer(path: str, what: str = "cannot write") -> Iterator[BinaryIO]:
    """A binary file that atomically replaces `path` if the block completes; errors are
    InputError("WHAT: reason") naming the path."""
    check_output_path(path)
    tmp, fd = open_exclusive_temp(path, what)
    try:
        with os.fdopen(fd, "w+b") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        forget_temp(tmp, remove=True)
        raise InputError(f"{what}: {e.strerror or e}", path=path) from None
    except BaseException:
        forget_temp(tmp, remove=True)
        raise
    forget_temp(tmp, remove=False)


def _on_sigterm(signum, frame) -> None:
    for tmp in list(_LIVE_TEMPS):
        forget_temp(tmp, remove=True)
    raise SystemExit(128 + signum)


def install_sigterm_cleanup() -> None:
    """SIGTERM removes live temp files and exits 143 (main thread only)."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, _on_sigterm)


def _collisions(names: list[str]) -> str | None:
    """A member that is also a directory of another member (`x` and `x/y`), if any."""
    files = set(names)
    for name in names:
        parts = name.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:
                return f"member {'/'.join(parts[:i])} is both a file and a directory ({name})"
    return None


def _open_dir(parent_fd: int, name: str, where: str) -> int:
    """Open (creating if needed) subdirectory `name` of parent_fd without following links."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=parent_fd)
    except OSError:
        raise InputError(f"refusing to extract into {name!r}: not a plain directory "
                         "(a symlink?)", path=where) from None


def _write_at(dir_fd: int, leaf: str, data: bytes) -> None:
    tmp = f".{leaf}.{os.urandom(8).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # replaces a link itself
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def extract_members(directory: str, names: list[str], get: Callable[[str], bytes],
                    bundle_path: str) -> list[str]:
    """Write members under `directory`; refuses name collisions and symlinked subdirs."""
    if problem := _collisions(names):
        raise InputError(f"refusing to extract: {problem}", path=bundle_path)
    try:
        os.makedirs(directory, exist_ok=True)
        root = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise InputError(f"cannot create directory: {e.strerror}", directory) from None
    written = []
    try:
        for name in names:
            *dirs, leaf = name.split("/")
            fds = [root]
            try:
                for d in dirs:
                    fds.append(_open_dir(fds[-1], d, directory))
                _write_at(fds[-1], leaf, get(name))
            finally:
                for fd in fds[1:]:
                    os.close(fd)
            written.append(os.path.join(directory, name))
    except OSError as e:
        raise InputError(f"cannot extract: {e.strerror or e}", directory) from None
    finally:
        os.close(root)
    return written
