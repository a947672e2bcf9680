"""A compile server's worker: one child of the server that runs compiles one after another.

A child forked for a single compile pays for the server's memory once more on every compile:
each page the compile writes (reference counts of the compiler's objects, the allocator's
arenas) is copied on its first write, 3,000-6,000 page copies for a small module, 8-30 ms,
and its exit tears that copy down again (3-6 ms). The worker pays for them once, then keeps
its pages: measured on 14 small samples, a compile in a worker that had already compiled
another module took 0.80 x the time of the same compile in a fresh child (geomean).

Between two compiles the worker is put back as it was: standard streams on /dev/null (so
that the client's pipes see their end of file before the client hears the exit status), the
working directory, environment, umask, argv, signal handlers, warning filters, NumPy's error
settings, the root logger's handlers and `tempfile`'s cached directory. What a compile
computes and memoizes depends on its arguments only (the server's stamp covers the sources,
the interpreter and the HLOC_* settings read at import; server.protocol.READ_AT_RUN_TIME
lists the few read at each compile), so a compile here writes the bundle a fresh process
writes, byte for byte (tests/test_server.py compiles a sequence of modules in one worker
and compares them with compiles in processes of their own).

The worker retires (exits; the server forks a new one for the next compile) after a compile
that did not end normally (an exit status other than 0, 1 or 2: an internal error, an
interrupt or a SIGTERM forwarded from the client), when a thread outlived the compile, after
MAX_COMPILES compiles, or once its peak memory passed MAX_RSS_BYTES; the server closes it after
IDLE_S seconds without a compile (its private copies of the server's pages go back to the
system).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import resource
import signal
import sys
import tempfile
import threading
import warnings
from typing import cast

from . import protocol

MAX_COMPILES = 200
MAX_RSS_BYTES = 2 << 30
IDLE_S = 300.0  # the server closes an idle worker's socket after this long
NORMAL_EXITS = (0, 1, 2)  # compiled; a check failed; bad input (exit codes of cli-contract.md)


def take_over(request: dict, fds: list[int]) -> None:
    """Become the client's `hloc` process: its standard streams (received as `fds`), umask,
    working directory, environment and argv (a request checked by daemon._checked_request)."""
    given = dict(zip(request["streams"], fds, strict=True))
    for stream in (0, 1, 2):
        source = given.get(stream)
        if source is None:
            source = os.open(os.devnull, os.O_RDWR)
        os.dup2(source, stream)
        os.close(source)
    os.umask(request["umask"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _open_streams()
    sys.argv = ["hloc", *request["argv"]]


def _open_streams() -> None:
    """sys.stdin, stdout and stderr on descriptors 0, 1 and 2 as they are now."""
    sys.stdin = open(0, encoding=sys.stdin.encoding, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding=sys.stdout.encoding, closefd=False,  # noqa: SIM115
                      buffering=1 if os.isatty(1) else -1)
    sys.stderr = open(2, "w", encoding=sys.stderr.encoding, errors="backslashreplace",  # noqa: SIM115
                      closefd=False, buffering=1)


class _Between:
    """The worker's state between compiles, saved before one and put back after it."""

    def __init__(self) -> None:
        import numpy as np

        self.np = np
        self.environ = dict(os.environ)
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.argv = list(sys.argv)
        self.warning_filters = list(warnings.filters)
        self.numpy_errors = np.geterr()
        root = logging.getLogger()
        self.log_handlers, self.log_level = list(root.handlers), root.level

    def restore(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the client's pipes reach their end of file now
            os.dup2(null, fd)
        os.close(null)
        _open_streams()
        root = logging.getLogger()
        for handler in root.handlers[:]:
            if handler not in self.log_handlers:
                root.removeHandler(handler)
                with contextlib.suppress(Exception):
                    handler.close()
        root.setLevel(self.log_level)
        cast(list, warnings.filters)[:] = self.warning_filters  # the list _warnings reads
        getattr(warnings, "_filters_mutated", lambda: None)()
        self.np.seterr(**self.numpy_errors)
        tempfile.tempdir = None  # the next client's TMPDIR, not this one's
        os.chdir("/")
        os.environ.clear()
        os.environ.update(self.environ)
        os.umask(self.umask)
        sys.argv = list(self.argv)


def retire_reason(status: int, compiles: int) -> str | None:
    """Why the worker should not take another compile after one that ended with `status`
    (its `compiles`-th), or None."""
    if status not in NORMAL_EXITS:
        return f"the compile ended with status {status}"
    if threading.active_count() > 1:
        return "a thread outlived the compile"
    if compiles >= MAX_COMPILES:
        return f"{compiles} compiles"
    if resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 > MAX_RSS_BYTES:
        return "peak memory above the limit"
    return None


def serve(ctl) -> None:
    """The worker's loop on `ctl` (its socket to the server): a request and the client's
    stream descriptors in, {"done": status, "retire": bool} out, until the server closes
    the socket or the worker retires (then it exits with the last compile's status, which
    the server reports if it reaps the worker before it reads "done"). Ends the process.

    Between compiles the forwarded signals have their default actions: one that arrives
    there (a client's Ctrl-C just as its compile is handed over, or just after it ended)
    ends the worker, and the server reports it as that client's result; none can reach a
    later compile."""
    from hloc.cli.main import run

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    between = _Between()
    compiles = status = 0
    while True:
        try:
            request, fds = protocol.recv(ctl, with_fds=3)
        except (OSError, ValueError, ConnectionError):  # closed by the server: stop
            break
        compiles += 1
        status = 3
        try:
            take_over(request, fds)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            status = run(request["argv"])
        except SystemExit as e:  # a signal handler's, outside the command's own handling
            status = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - reported as the contract's internal error
            with contextlib.suppress(Exception):
                import traceback

                traceback.print_exc()
        finally:
            for sig in protocol.FORWARDED_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            between.restore()
        reason = retire_reason(status, compiles)
        try:
            protocol.send(ctl, {"done": status, "retire": reason is not None})
        except OSError:
            break
        if reason is not None:
            break
        gc.collect()  # while idle, not in the next compile
    os._exit(status if 0 <= status <= 255 else 3)
