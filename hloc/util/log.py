"""hloc's loggers: `logging` loggers that import `logging` only once a record could be
emitted.

Importing `logging` (with `traceback`, `textwrap` and `string`, which it brings) cost a
command about 4 ms, and a compile run from its own command line logs nothing at its default
level: its passes' debug records are dropped by the WARNING threshold. So `get_logger` gives a
stand-in that, while `logging` is not imported, drops records below the threshold the command
configured (`configure`; WARNING before any, as Python's last-resort handler has it) without
importing it; a record at or above it, or any call once something else has imported
`logging` (a test, a library user, the runtime), goes to the real logger of that name, with
the command's configuration applied first. Records read as if the caller had logged them.
"""

from __future__ import annotations

import sys
from typing import Any

DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40  # logging's own values

_threshold = WARNING
_pending: dict[str, Any] | None = None  # basicConfig's arguments, until logging is imported


def configure(debug: bool) -> None:
    """A command's logging: records of `hloc...` loggers (and others) on stderr as
    `name: message`, from DEBUG with `debug`, else from WARNING. Applied now with `debug` or
    where `logging` is imported already, else when it first is through a logger of ours."""
    global _threshold, _pending
    _threshold = DEBUG if debug else WARNING
    _pending = {"level": _threshold, "format": "%(name)s: %(message)s", "stream": sys.stderr}
    if debug or "logging" in sys.modules:
        _logging()


def _logging():
    """The logging module, with the pending configuration applied."""
    global _pending
    import logging

    if _pending is not None:
        logging.basicConfig(**_pending)
        _pending = None
    return logging


class Logger:
    """A stand-in for `logging.getLogger(name)` (see the module's docstring)."""

    __slots__ = ("name", "_logger")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger = None

    def _real(self):
        """The logging.Logger of this name (the pending configuration applied first)."""
        logging = _logging()
        if self._logger is None:
            self._logger = logging.getLogger(self.name)
        return self._logger

    def _emit(self, level: int, msg: str, args: tuple, kwargs: dict) -> None:
        if level < _threshold and "logging" not in sys.modules:
            return
        kwargs.setdefault("stacklevel", 3)  # the caller of debug()/info()/..., not this
        self._real().log(level, msg, *args, **kwargs)

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._emit(DEBUG, msg, args, kwargs)

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._emit(INFO, msg, args, kwargs)

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._emit(WARNING, msg, args, kwargs)

    def error(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._emit(ERROR, msg, args, kwargs)

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 -- logging.Logger's name
        if level < _threshold and "logging" not in sys.modules:
            return False
        return self._real().isEnabledFor(level)


def get_logger(name: str) -> Logger:
    return Logger(name)
