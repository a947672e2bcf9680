"""Shared CLI plumbing: the exit-status contract, error lines, debug switches."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

from ..errors import HlocError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


def debug_enabled(flag: bool = False) -> bool:
    """--debug or HLOC_DEBUG=1: tracebacks for internal errors, verification after each pass."""
    return flag or os.environ.get("HLOC_DEBUG", "") not in ("", "0")


def setup_logging(debug: bool) -> None:
    from ..util.log import configure

    configure(debug)


# Set by `hlo-run --processes` for its ranks: a directory where each rank also leaves the line
# it prints on failure. mpiexec forwards a rank's stderr, but under load it was seen to end a
# failed job before forwarding the failing rank's line (1 run in some 20 beside a test suite).
RANK_MESSAGES_ENV = "HLOC_RANK_MESSAGES"


def echo_err(text: str, nl: bool = True) -> None:
    """`text` (and a newline) on stderr, flushed: click.echo(text, err=True) without click,
    which a compile run from its own command line does not import (cli/compile_cmd.py)."""
    stream = sys.stderr
    if stream is None:
        return
    stream.write(text + "\n" if nl else text)
    stream.flush()


def say_error(line: str) -> None:
    """`line` on stderr, and for an MPI rank, in the launcher's message directory too."""
    echo_err(line)
    directory = os.environ.get(RANK_MESSAGES_ENV)
    if directory:
        try:
            with open(os.path.join(directory, f"rank-{os.getpid()}"), "a") as f:
                f.write(line + "\n")
        except OSError:
            pass  # stderr has it; the directory is only a second path


def guarded(prog: str):
    """Decorate a click command so errors follow the contract.

    HlocError → its one-line message on stderr and its exit code (1 or 2); anything else → exit 3
    with a one-line summary (full traceback only with --debug / HLOC_DEBUG=1).
    """

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            debug = debug_enabled(bool(kwargs.get("debug")))
            try:
                return fn(*args, **kwargs)
            except HlocError as e:
                if not getattr(e, "quiet", False):  # e.g. another MPI rank reports it
                    say_error(f"{prog}: error: {e}")
                sys.exit(e.exit_code)
            except BrokenPipeError:
                # The reader went away (e.g. `| head`): not an error of ours.
                sys.stderr.close()
                sys.exit(EXIT_OK)
            except KeyboardInterrupt:
                echo_err(f"{prog}: interrupted")
                sys.exit(130)
            except MemoryError:
                say_error(f"{prog}: error: out of memory")
                sys.exit(EXIT_INTERNAL)
            except Exception as e:  # noqa: BLE001 - the contract's exit 3
                if _from_click(e):  # click's own exits and usage errors: click reports them
                    raise
                if debug:
                    import traceback

                    traceback.print_exc()
                say_error(f"{prog}: internal error: {type(e).__name__}: {e} "
                          f"(rerun with --debug or HLOC_DEBUG=1 for a traceback)")
                sys.exit(EXIT_INTERNAL)

        return run

    return wrap


def _from_click(error: BaseException) -> bool:
    """An exception of click's (Exit, ClickException, Abort), told without importing click."""
    return any(c.__module__.split(".")[0] == "click" for c in type(error).__mro__)


@contextlib.contextmanager
def about_file(path: str) -> Iterator[None]:
    """An error raised inside that names no file of its own is about PATH (the model a
    compile reads, the bundle a run runs), so its line names it as the contract asks."""
    try:
        yield
    except HlocError as e:
        if e.path is None:
            e.path = path
        raise


def bad_usage(message: str) -> HlocError:
    from ..errors import InputError

    return InputError(message)


def exit_without_teardown(code: str | int | None) -> NoReturn:
    """End the process as `sys.exit(code)` would, without Python's teardown of every module
    and object: after a compile that teardown took 0.1-0.15 s of a command of 0.5-1 s (a
    heap of IR and LLVM objects, hundreds of modules). atexit handlers still run (logging
    flushes there) and the standard streams are flushed. With another thread still running,
    the ordinary exit, which waits for it."""
    if threading.active_count() > 1:
        sys.exit(code)
    # What the command printed goes out (exit_status flushes) before the exit handlers run:
    # under mpiexec, MPI's finalize (an atexit handler of mpi4py) ends the forwarding of a
    # rank's output.
    status = exit_status(code)
    atexit._run_exitfuncs()
    os._exit(_flush_streams(status))


def exit_status(code: str | int | None) -> int:
    """The process status `sys.exit(code)` gives (a message goes to stderr, status 1), with
    the standard streams flushed."""
    if code is None:
        status = EXIT_OK
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): the message on stderr, status 1
        print(code, file=sys.stderr)
        status = EXIT_CHECK_FAILED
    return _flush_streams(status)


def _flush_streams(status: int) -> int:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # what Python's own exit gives when stdout cannot flush
    return status
