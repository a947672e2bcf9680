"""`hloc compile` through a running compile server, before anything heavy is imported.

`run_compile(argv)` returns the command's exit status when a server for this hloc ran it, and
None when there is none (or HLOC_SERVER=off): the caller then compiles in its own process, as
it always could. In the default mode, HLOC_SERVER=auto, a missing server is also started in
the background for the next compile, once this process's own compile is over (as it exits:
started earlier, the server's warm-up competes with the compile for the cores, which made a
first compile 1.3 x slower on 2 cores). HLOC_SERVER=use takes a running server, never starts
one.
"""

from __future__ import annotations

import _signal  # `signal` builds enums at import: 1-2 ms of every served compile
import atexit
import os
import sys

from . import protocol

ACK_TIMEOUT_S = 10.0
MODES = {"": "auto", "auto": "auto", "use": "use", "off": "off", "0": "off", "no": "off",
         "false": "off"}
FORWARDED = protocol.FORWARDED_SIGNALS


class ModeError(ValueError):
    """HLOC_SERVER has a value that is none of MODES."""


def mode() -> str:
    """HLOC_SERVER as "auto" (the default), "use" or "off"; ModeError for another value."""
    value = os.environ.get("HLOC_SERVER", "")
    how = MODES.get(value.strip().lower())
    if how is None:
        raise ModeError(f"HLOC_SERVER={value!r}: expected auto (the default), use or off")
    return how


def run_compile(argv: list[str]) -> int | None:
    how = mode()
    if how == "off":
        return None
    try:
        files = protocol.server_files(create=how == "auto")
    except protocol.ServerDirError:
        return None  # none of ours can be there; `hloc server start` explains why
    try:
        sock = protocol.connect(files["sock"], timeout=2.0)
    except OSError:
        if how == "auto":
            atexit.register(_start_quietly, files["log"])
        return None
    try:
        return _session(sock, argv, files["sock"])
    finally:
        sock.close()


def _session(sock, argv: list[str], where: str) -> int | None:
    streams = [fd for fd in (0, 1, 2) if _is_open(fd)]
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        cwd = os.getcwd()
    except OSError:
        return None  # the working directory is gone: let the command say so itself
    request = {"op": "compile", "v": protocol.PROTOCOL, "argv": argv, "cwd": cwd,
               "env": dict(os.environ), "umask": umask, "streams": streams}
    # The compile starts before its answer arrives: a signal in between waits (blocked) for
    # the handlers that forward it, rather than ending this process alone.
    mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, FORWARDED)
    try:
        try:
            protocol.send(sock, request, streams)
            sock.settimeout(ACK_TIMEOUT_S)
            answer, _ = protocol.recv(sock)
        except (OSError, ValueError, ConnectionError) as e:
            detail = "did not answer in time" if isinstance(e, TimeoutError) else f"failed ({e})"
            print(f"hloc: warning: the compile server at {where} {detail}; compiling in this "
                  "process (`hloc server stop` ends it)", file=sys.stderr)
            return None
        if "pid" not in answer:
            return None  # e.g. a request it does not take: compile here
        _forward_signals(sock)
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)  # a held signal is forwarded now
    return _wait(sock)


def _forward_signals(sock) -> None:
    def forward(sig, _frame):
        try:
            protocol.send(sock, {"signal": int(sig)})
        except OSError:
            pass

    for sig in FORWARDED:
        _signal.signal(sig, forward)


def _wait(sock) -> int:
    """Wait for the compile's exit status (our signals forwarded to it meanwhile)."""
    sock.settimeout(None)
    try:
        result, _ = protocol.recv(sock)
    except (OSError, ValueError, ConnectionError):
        print("hloc: internal error: the compile server went away in the middle of the "
              "compile (stopped or killed); rerun, or set HLOC_SERVER=off", file=sys.stderr)
        return 3
    if "exit" in result and isinstance(result["exit"], int):
        return result["exit"]
    sig = result.get("signal")
    if sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
        return 128 + sig
    print(f"hloc: internal error: the compile crashed (signal {sig}) in the compile server; "
          "rerun with HLOC_SERVER=off and --debug for a traceback", file=sys.stderr)
    return 3


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _start_quietly(log: str) -> None:
    """HLOC_SERVER=auto's start, as the compile that found no server exits, if it compiled
    (not for `--help`, a usage error or a compile-cache hit, which import no compiler). A
    server that is already starting (another client's) keeps the lock; this one then leaves
    at once."""
    if "hloc.compiler" not in sys.modules:
        return
    try:
        spawn(protocol.IDLE_TIMEOUT_S, log, auto=True)
    except OSError:
        pass  # no server then: the next compile runs in its own process too


def spawn(idle_timeout: float, log: str, auto: bool = False):
    """Start a detached server for this hloc (same Python, same sys.path and environment);
    returns the subprocess.Popen. `auto`: started by a compile (HLOC_SERVER=auto), it gives
    up at once rather than wait when another server holds the lock."""
    import subprocess

    code = ("import sys; sys.path[:] = sys.argv[3:]; "
            "from hloc.server.daemon import main; sys.exit(main(sys.argv[1:3]))")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    try:
        return subprocess.Popen([sys.executable, "-c", code, str(idle_timeout),
                                 "auto" if auto else "start", *sys.path],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fd,
                                cwd="/", start_new_session=True, close_fds=True)
    finally:
        os.close(fd)
