"""File helpers: atomic writes, so no output is ever left half-written."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import BinaryIO


@contextlib.contextmanager
def atomic_writer(path: str) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces `path` only if the block completes without error."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix="-" + os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(path: str, data: bytes | str) -> None:
    """Write `data` to `path` atomically (temp file in the same directory, then rename)."""
    if isinstance(data, str):
        data = data.encode()
    with atomic_writer(path) as f:
        f.write(data)
