"""Bounds on a run: --timeout, Ctrl-C inside native loops, --max-memory.

Native drivers (hloc/codegen/cpu/driver.py) run whole while loops without returning to
Python, so Python's signal handlers cannot run until they return. Each native loop polls the
i32 `hloc_stop_flag` defined here (its address is given to LLVM's symbol table as
`hloc_stop_flag`) once per iteration. `run_limits()` routes SIGINT and SIGALRM through
`signal.set_wakeup_fd` to a watcher thread, which sets the flag even while the main thread is
inside native code (ctypes releases the GIL); the driver returns, and the Python-level handler
then raises KeyboardInterrupt (exit 130) or RunTimeout (exit 1) in the main thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
from collections.abc import Iterator

from ..errors import CheckFailed, InputError

STOP_FLAG_SYMBOL = "hloc_stop_flag"
_STOP_FLAG = ctypes.c_int32(0)
_STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGALRM, signal.SIGTERM})
_registered = False
_register_lock = threading.Lock()


class RunTimeout(CheckFailed):
    """The run took longer than --timeout (exit 1)."""


def provide_runtime_symbols() -> None:
    """Make the symbols generated code may import resolvable by LLVM's JIT (once)."""
    global _registered
    with _register_lock:
        if _registered:
            return
        import llvmlite.binding as llvm_binding

        llvm_binding.add_symbol(STOP_FLAG_SYMBOL, ctypes.addressof(_STOP_FLAG))
        _registered = True


def stop_requested() -> bool:
    return bool(_STOP_FLAG.value)


def _watch(read_fd: int) -> None:
    """Set the stop flag for every signal the wakeup fd reports, until the fd closes."""
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        if any(b in _STOP_SIGNALS for b in data):  # not SIGCHLD, SIGWINCH, ...
            _STOP_FLAG.value = 1


@contextlib.contextmanager
def run_limits(timeout: float | None, what: str, path: str | None = None) -> Iterator[None]:
    """Stop the block on Ctrl-C (KeyboardInterrupt) or after `timeout` seconds (RunTimeout
    naming `what`), native loops included. Main thread only; elsewhere it only runs the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    provide_runtime_symbols()
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    watcher = threading.Thread(target=_watch, args=(read_fd,), daemon=True,
                               name="hloc-stop-watcher")
    watcher.start()

    def on_alarm(signum, frame):
        raise RunTimeout(f"{what} ran longer than --timeout {timeout:g} s", path)

    old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    old_alarm = signal.signal(signal.SIGALRM, on_alarm)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    _STOP_FLAG.value = 0
    try:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, timeout)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGALRM, old_alarm)
        signal.signal(signal.SIGINT, old_int)
        os.close(write_fd)
        watcher.join(1.0)
        os.close(read_fd)
        _STOP_FLAG.value = 0


def check_timeout(value: float | None) -> float | None:
    """--timeout S: a positive number of seconds (None: no limit)."""
    if value is None:
        return None
    if not value > 0 or value > 1e7:
        raise InputError(f"--timeout wants a positive number of seconds, got {value:g}")
    return value


def host_memory_bytes() -> int | None:
    """Physical memory of this host, or None where unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def preflight_memory(manifest: dict, limit: int | None, path: str | None = None) -> None:
    """Refuse a run whose arguments + outputs + temp + constants exceed --max-memory (or the
    host's memory) before anything is allocated."""
    mem = manifest.get("memory") or {}
    need = sum(int(mem.get(k, 0)) for k in ("argument_bytes", "output_bytes", "temp_bytes",
                                            "constant_bytes"))
    host = host_memory_bytes()
    if limit is not None and need > limit:
        raise InputError(f"the run needs {need} bytes (arguments + outputs + temp + "
                         f"constants), over --max-memory {limit}", path)
    if host is not None and need > host:
        raise InputError(f"the run needs {need} bytes, more than this host's {host}", path)
