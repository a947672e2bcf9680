"""`hloc server start|stop|status`: the compile server (hloc.server)."""

from __future__ import annotations

import contextlib
import json
import os
import time

import click

from ..errors import InputError
from ..server import protocol
from .common import guarded

START_TIMEOUT_S = 60.0


@click.group(name="server")
def server_cmd() -> None:
    """A resident compile server: `hloc compile` runs in a warm process (imports done, LLVM
    initialized) instead of starting one, byte-identical output. One per hloc, Python,
    sys.path and HLOC_* environment. By default (HLOC_SERVER=auto) a compile that finds none
    starts one as it exits; HLOC_SERVER=use only uses a running one, HLOC_SERVER=off bypasses
    it; HLOC_SERVER_DIR (default $XDG_RUNTIME_DIR/hloc or /tmp/hloc-server-UID)."""


def _this_server() -> dict[str, str]:
    try:
        return protocol.server_files(create=True)
    except protocol.ServerDirError as e:
        raise InputError(str(e)) from None


def _ask(path: str, message: dict) -> dict | None:
    try:
        return protocol.ask(path, message)
    except (OSError, ValueError, ConnectionError):
        return None


@server_cmd.command()
@click.option("--idle-timeout", default=protocol.IDLE_TIMEOUT_S, show_default=True, type=float, metavar="S",
              help="exit after S seconds without a compile (0: never)")
@click.option("--foreground", is_flag=True, help="serve from this process until stopped")
@guarded("hloc server")
def start(idle_timeout, foreground):
    """Start the compile server for this hloc (nothing to do if it runs)."""
    if not 0 <= idle_timeout < float("inf"):  # NaN fails too
        raise InputError("--idle-timeout must be a number of seconds, 0 or more (0: never)")
    files = _this_server()
    running = _ask(files["sock"], {"op": "status"})
    if running:
        click.echo(f"hloc server: already running (pid {running['pid']}, socket {files['sock']})")
        return
    if foreground:
        from ..server.daemon import serve

        raise SystemExit(serve(idle_timeout))
    from ..server.client import spawn

    proc = spawn(idle_timeout, files["log"])
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        status = _ask(files["sock"], {"op": "status"})
        if status:
            click.echo(f"hloc server: started (pid {status['pid']}, socket {files['sock']}, "
                       f"idle timeout {idle_timeout:g} s)")
            return
        if proc.poll() is not None and not _ask(files["sock"], {"op": "status"}):
            raise InputError(f"the server exited while starting: {_last_line(files['log'])}")
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    raise InputError(f"the server did not start within {START_TIMEOUT_S:g} s "
                     f"(its log: {files['log']})")


def _last_line(log: str) -> str:
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        lines = []
    return lines[-1] if lines else "no message"


def _all_sockets() -> list[str]:
    try:
        directory = protocol.checked_dir(create=False)
    except protocol.ServerDirError:
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".sock"))


@server_cmd.command()
@click.option("--all", "every", is_flag=True, help="every server of this user, any hloc")
@guarded("hloc server")
def stop(every):
    """Stop the compile server (running compiles finish first)."""
    targets = _all_sockets() if every else [_this_server()["sock"]]
    stopped = 0
    for path in targets:
        answer = _ask(path, {"op": "stop"})
        if answer:
            stopped += 1
            click.echo(f"hloc server: stopping pid {answer['pid']} ({path})")
    if not stopped:
        click.echo("hloc server: none running")


@server_cmd.command()
@click.option("--json", "as_json", is_flag=True, help="one JSON object per server")
@guarded("hloc server")
def status(as_json):
    """The running servers of this user; which one this hloc uses."""
    mine = _this_server()["sock"]
    rows = []
    for path in _all_sockets():
        answer = _ask(path, {"op": "status"})
        if answer:
            rows.append({**answer, "current": path == mine})
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    if not rows:
        click.echo("hloc server: none running")
    for row in rows:
        uptime = time.time() - row["started"]
        worker = f"worker {row['worker']}" if row.get("worker") else "no worker"
        click.echo(f"pid {row['pid']}  {'this hloc' if row['current'] else 'another hloc'}  "
                   f"up {uptime:.0f} s  served {row['served']}  running {row['running']}  "
                   f"{worker}  idle timeout {row['idle_timeout']:g} s  {row['socket']}")
    if not any(r["current"] for r in rows):
        click.echo(f"this hloc would use {mine}; `hloc server start` starts it")
