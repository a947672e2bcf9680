"""The compile server: one process that has imported the compiler and compiled a small module
once, and hands every `hloc compile` request to a child, a copy of that warm process.

The child takes over the client's standard streams (received as file descriptors), working
directory, environment, umask and argv and runs the `hloc` command line exactly as a fresh
process would; the server reports its exit status to the client. Compiles go to one *worker*
child (server.worker), which runs them one after another and is put back as it was between
them, so that only its first compile pays for copying the server's pages; a request that
arrives while the worker is busy gets a child of its own, which exits after its compile.
Either way the output is the bundle a fresh process writes, byte for byte.

The parent never compiles after start-up and runs no threads (fork must not copy a process
in the middle of another thread's work). It exits when stopped (`hloc server stop`, SIGTERM,
SIGINT) or after `idle_timeout` seconds without a request, once its running compiles end.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import zlib

from ..util.sources import PACKAGE_DIR, source_files, stat_listing
from . import protocol, worker

# hloc's sources as this server imported them (a checksum of their paths, sizes and mtimes).
SOURCES = f"{zlib.crc32(stat_listing(source_files()).encode()):08x}"

FORWARDED_SIGNALS = protocol.FORWARDED_SIGNALS

# Compiled once at start-up, so that the first request does not pay for the lazy imports and
# first-call work of a compile (LLVM's targets, the pass registry, the emitters' tables).
WARM_UP_MODULE = """HloModule warm_up

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,4] parameter(1)
  d = f32[8,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  zero = f32[] constant(0)
  zeros = f32[8,4] broadcast(zero), dimensions={}
  r = f32[8,4] maximum(d, zeros)
  e = f32[8,4] exponential(r)
  s = f32[8] reduce(e, zero), dimensions={1}, to_apply=add
  t = f32[4,8] transpose(e), dimensions={1,0}
  ROOT out = (f32[8], f32[4,8]) tuple(s, t)
}
"""

# A second one with the structured operations (convolution, pooling window, while loop with
# dynamic slices, sort, gather, a conversion): their emitters and passes warm up too.
WARM_UP_MODULE_2 = """HloModule warm_up_more

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT l = pred[] compare(a, b), direction=LT
}

cond {
  state = (s32[], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  n = s32[] constant(3)
  ROOT more = pred[] compare(i, n), direction=LT
}

body {
  state = (s32[], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  x = f32[4,8] get-tuple-element(state), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  t = f32[4,8] tanh(x)
  zero = s32[] constant(0)
  row = f32[1,8] dynamic-slice(t, i, zero), dynamic_slice_sizes={1,8}
  y = f32[4,8] dynamic-update-slice(x, row, zero, zero)
  ROOT next = (s32[], f32[4,8]) tuple(j, y)
}

ENTRY main {
  img = f32[2,8,8,3] parameter(0)
  k = f32[3,3,3,4] parameter(1)
  x = f32[4,8] parameter(2)
  idx = s32[5,1] parameter(3)
  conv = f32[2,8,8,4] convolution(img, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  ninf = f32[] constant(-inf)
  pool = f32[2,4,4,4] reduce-window(conv, ninf), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max
  zi = s32[] constant(0)
  init = (s32[], f32[4,8]) tuple(zi, x)
  loop = (s32[], f32[4,8]) while(init), condition=cond, body=body
  lx = f32[4,8] get-tuple-element(loop), index=1
  io = s32[4,8] iota(), iota_dimension=1
  sorted = (f32[4,8], s32[4,8]) sort(lx, io), dimensions={1}, is_stable=true, to_apply=less
  sv = f32[4,8] get-tuple-element(sorted), index=0
  g = f32[5,8] gather(sv, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}
  h = f16[5,8] convert(g)
  zero = f32[] constant(0)
  tot = f32[2] reduce(pool, zero), dimensions={1,2,3}, to_apply=add
  ROOT out = (f32[2], f16[5,8], f32[4,8]) tuple(tot, h, sv)
}
"""


# Every module of these packages is imported at start-up: a child is a fresh copy of the
# server, so whatever it imports lazily it imports again on every compile.
COMPILER_PACKAGES = ("analysis", "buffers", "bundle", "codegen", "collectives", "frontend", "ir",
                     "passes", "schedule", "thunks", "util")


def import_compiler() -> None:
    import importlib
    import pkgutil

    for name in ("hloc.cli.main", "hloc.compiler", "hloc.cached_compile", "hloc.plan"):
        importlib.import_module(name)
    for package in COMPILER_PACKAGES:
        module = importlib.import_module(f"hloc.{package}")
        for info in pkgutil.walk_packages(module.__path__, f"hloc.{package}."):
            if ".emulate" in info.name:  # the CUDA emulator: hlo-run's, not a compile's
                continue
            with contextlib.suppress(ImportError):  # an optional extra's
                importlib.import_module(info.name)


def warm_up() -> None:
    """Import what `hloc compile` may import and compile WARM_UP_MODULE (in this process, so
    every child inherits the result)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as a command's compile does
    import_compiler()
    from hloc.cached_compile import source_fingerprint
    from hloc.compiler import CompileOptions, compile_model

    source_fingerprint()  # memoized: the sources are this server's stamp, they cannot change

    for n, text in enumerate((WARM_UP_MODULE, WARM_UP_MODULE_2)):
        compile_model(f"warm_up_{n}.hlo", CompileOptions(), data=text.encode())
    gc.collect()
    gc.freeze()  # the children's collections leave the parent's objects (and pages) alone


class _Worker:
    """The server's side of its worker: the child's pid, the socket to it, the client
    connection of the compile it runs (None while idle) and since when it is idle."""

    def __init__(self, pid: int, ctl: socket.socket):
        self.pid, self.ctl = pid, ctl
        self.client: socket.socket | None = None
        self.idle_since = time.monotonic()


class Server:
    """The accept loop: see the module docstring."""

    def __init__(self, listener: socket.socket, ident: str, socket_path: str,
                 idle_timeout: float):
        self.listener, self.ident, self.socket_path = listener, ident, socket_path
        self.idle_timeout = idle_timeout
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}
        self.killed: set[int] = set()
        self.served = 0
        self.started = time.time()
        self.last_active = time.monotonic()
        self.stopping = False
        self.stop_reason = ""
        self.wake_r, self.wake_w = os.pipe()
        self.worker: _Worker | None = None

    # ---- the loop ----

    def run(self) -> None:
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through the pipe
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _: self.stop(f"signal {signum}"))
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        while not (self.stopping and not self.children):
            timeout = self._idle_left()
            if timeout is not None and timeout <= 0:
                self.stop(f"idle for {self.idle_timeout:g} s")
                continue
            for key, _ in self.selector.select(self._worker_wait(timeout)):
                self._dispatch(key.data)
            self._reap()

    def _idle_left(self) -> float | None:
        if self.children or self.stopping or self.idle_timeout <= 0:
            return None
        return self.idle_timeout - (time.monotonic() - self.last_active)

    def _worker_wait(self, timeout: float | None) -> float | None:
        """`timeout`, or less to close an idle worker in time (closed here once due)."""
        w = self.worker
        if w is None or w.client is not None:
            return timeout
        left = w.idle_since + worker.IDLE_S - time.monotonic()
        if left <= 0:
            self._close_worker()
            return timeout
        return left if timeout is None else min(timeout, left)

    def _dispatch(self, what) -> None:
        if what == "accept":
            self._accept()
        elif what == "worker":
            self._worker_done()
        elif what == "wake":
            with contextlib.suppress(BlockingIOError):
                os.read(self.wake_r, 4096)
        else:
            self._client_event(what)

    def stop(self, reason: str) -> None:
        """Stop accepting (the socket goes, so new clients compile on their own); running
        compiles finish. `reason` goes to the log."""
        if self.stopping:
            return
        self.stopping = True
        self.stop_reason = reason
        if self.worker is not None and self.worker.client is None:
            self._close_worker()
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(self.listener)
        self.listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)

    # ---- requests ----

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        try:
            conn.settimeout(5.0)
            if not _same_user(conn):
                conn.close()
                return
            message, fds = protocol.recv(conn, with_fds=3)
        except (OSError, ValueError, ConnectionError):
            conn.close()
            return
        try:
            self._handle(conn, message, fds)
        except (OSError, ValueError, TypeError) as e:
            with contextlib.suppress(OSError):
                protocol.send(conn, {"error": f"bad request: {e}"})
            conn.close()
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _handle(self, conn: socket.socket, message: dict, fds: list[int]) -> None:
        op = message.get("op")
        if op == "status":
            protocol.send(conn, self.status())
            conn.close()
        elif op == "stop":
            protocol.send(conn, {"stopping": True, "pid": os.getpid(),
                                 "running": len(self.children)})
            conn.close()
            self.stop("asked to stop")
        elif op == "compile" and message.get("v") == protocol.PROTOCOL:
            request = _checked_request(message, fds)
            self._fork(conn, request, fds)
        else:
            raise ValueError(f"unknown request {op!r} (protocol {message.get('v')!r})")

    def status(self) -> dict:
        return {"pid": os.getpid(), "stamp": self.ident, "sources": SOURCES,
                "socket": self.socket_path,
                "started": self.started, "served": self.served, "running": len(self.children),
                "idle_timeout": self.idle_timeout, "python": sys.executable,
                "hloc": PACKAGE_DIR, "worker": self.worker.pid if self.worker else None}

    def _fork(self, conn: socket.socket, request: dict, fds: list[int]) -> None:
        """Hand the request to the worker (started now if there is none), or to a child of
        its own while the worker is busy."""
        pid = self._to_worker(conn, request, fds)
        if pid is None:
            pid = self._fork_child(lambda mask: _child(self, conn, request, fds, mask))
        self.served += 1
        self.last_active = time.monotonic()  # compiles keep a server alive; status asks do not
        self.children[pid] = conn
        conn.settimeout(1.0)
        self.selector.register(conn, selectors.EVENT_READ, pid)
        with contextlib.suppress(OSError):  # a client already gone: the selector says so
            protocol.send(conn, {"pid": pid})

    def _fork_child(self, run) -> int:
        """Fork a child that leaves the server and calls `run(mask)` (never returning).
        A signal the client forwards can reach the child before the child has dropped the
        server's handlers (which would stop the server's loop, in the child, and go on): the
        child starts with them blocked, and `run` restores `mask` once its own are in place."""
        before = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
        pid = os.fork()
        if pid == 0:
            try:
                run(before)
            finally:
                os._exit(3)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        return pid

    def _to_worker(self, conn: socket.socket, request: dict, fds: list[int]) -> int | None:
        """The worker's pid once it has the request, or None (busy, or it cannot take it)."""
        if self.worker is None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            ours.settimeout(10.0)

            def run(mask) -> None:
                # Not the client's: its streams (the server's copies: a pipe held open here
                # would never see its end of file) and connection.
                for fd in fds:
                    os.close(fd)
                _leave_server(self, mask, [ours, conn])
                worker.serve(theirs)

            try:
                pid = self._fork_child(run)
            except OSError:
                ours.close()
                raise
            finally:
                theirs.close()
            self.worker = _Worker(pid, ours)
            self.selector.register(ours, selectors.EVENT_READ, "worker")
        w = self.worker
        if w.client is not None:
            return None
        try:
            protocol.send(w.ctl, request, fds)
        except OSError:  # it has just gone: the next request starts another
            self._close_worker()
            return None
        w.client = conn
        return w.pid

    def _worker_done(self) -> None:
        """The worker's answer: its compile's exit status, for its client."""
        w = self.worker
        if w is None:
            return
        try:
            message, _ = protocol.recv(w.ctl)
        except (OSError, ValueError, ConnectionError):  # it ended: _reap reports it
            self._close_worker()
            return
        conn, w.client, w.idle_since = w.client, None, time.monotonic()
        status = message.get("done")
        if conn is not None and self.children.pop(w.pid, None) is conn:
            self.last_active = time.monotonic()
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn)
            with contextlib.suppress(OSError):
                protocol.send(conn, {"exit": status if isinstance(status, int) else 3})
            conn.close()
        if message.get("retire") or self.stopping or self.killed & {w.pid}:
            self._close_worker()

    def _close_worker(self) -> None:
        """Let the worker go: it exits when it reads the end of its socket (and is reaped)."""
        w, self.worker = self.worker, None
        if w is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(w.ctl)
            w.ctl.close()

    def _client_event(self, pid: int) -> None:
        """The client of child `pid` forwarded a signal, or went away (then the child is
        stopped as a killed command would be: SIGTERM, which removes its temp files)."""
        conn = self.children.get(pid)
        if conn is None:
            return
        try:
            message, _ = protocol.recv(conn)
            sig = message.get("signal")
        except (OSError, ValueError, ConnectionError):
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn)
            sig = signal.SIGTERM
        if sig in {int(s) for s in FORWARDED_SIGNALS} and pid not in self.killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if sig != signal.SIGINT:
                self.killed.add(pid)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            self.killed.discard(pid)
            self.last_active = time.monotonic()
            if self.worker is not None and self.worker.pid == pid:
                self._close_worker()  # it ended in a compile (or while idle): a new one next
            if conn is None:
                continue
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn)
            result = ({"exit": os.WEXITSTATUS(status)} if os.WIFEXITED(status)
                      else {"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1})
            with contextlib.suppress(OSError):
                protocol.send(conn, result)
            conn.close()


def _same_user(conn: socket.socket) -> bool:
    """The peer runs as this server's user (SO_PEERCRED; the directory's mode already keeps
    others out)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    fmt = "3i"
    _pid, uid, _gid = struct.unpack(fmt, conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize(fmt)))
    return uid == os.getuid()


def _checked_request(message: dict, fds: list[int]) -> dict:
    argv, cwd, env = message.get("argv"), message.get("cwd"), message.get("env")
    streams = message.get("streams")
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)
            and argv[:1] == ["compile"]):
        raise ValueError("argv must be a list of strings starting with 'compile'")
    if not isinstance(cwd, str) or not isinstance(env, dict):
        raise ValueError("cwd and env are required")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError("env must map strings to strings")
    if not (isinstance(streams, list) and len(streams) == len(fds)
            and all(s in (0, 1, 2) for s in streams) and len(set(streams)) == len(streams)):
        raise ValueError("streams must name the descriptors sent (0, 1, 2)")
    umask = message.get("umask", 0o022)
    if not isinstance(umask, int) or not 0 <= umask <= 0o777:
        raise ValueError("umask must be an integer from 0 to 0o777")
    return {"argv": argv, "cwd": cwd, "env": env, "streams": streams, "umask": umask}


def _child(server: Server, conn: socket.socket, request: dict, fds: list[int],
           mask: set[int | signal.Signals]) -> None:
    """In a child of its own (the worker busy): become the client's `hloc` process and run its
    command line (`mask`: the signal mask to restore once the child's own handlers are in
    place)."""
    code = 3
    try:
        _leave_server(server, mask, [conn])
        worker.take_over(request, fds)
        from hloc.cli.main import main

        main()  # ends the process itself (exit_without_teardown)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - a child must never return into the server's loop
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _leave_server(server: Server, mask: set[int | signal.Signals],
                  also: list[socket.socket]) -> None:
    """In a new child: close what is the server's (its sockets, the clients' connections,
    the worker's socket, the wake-up pipe, `also`), give the forwarded signals their default
    actions (SIGINT: KeyboardInterrupt) and restore the signal mask `mask`."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one already forwarded takes effect now
    server.selector.close()
    theirs = [server.listener, *server.children.values(), *also]
    if server.worker is not None:
        theirs.append(server.worker.ctl)
    for sock in theirs:
        sock.close()
    for fd in (server.wake_r, server.wake_w):
        os.close(fd)


def _take_lock(lock: int, socket_path: str, wait_s: float = 10.0) -> bool:
    """The server's lock, or False when another server holds it. A holder without a socket
    is starting up or stopping (it removes its socket first): wait for it, up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if os.path.exists(socket_path) or time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def serve(idle_timeout: float, announce=print, lock_wait_s: float = 10.0) -> int:
    """Run a server for this process's stamp until it stops. 0 when it ran (or one already
    runs: `announce` says so), 2 when the server directory is unsafe or too long a path.
    `lock_wait_s`: how long to wait for a server that holds the lock without a socket
    (starting or stopping) before leaving it be."""
    try:
        files = protocol.server_files(create=True)
    except protocol.ServerDirError as e:
        print(f"hloc server: error: {e}", file=sys.stderr)
        return 2
    lock = os.open(files["lock"], os.O_RDWR | os.O_CREAT, 0o600)
    if not _take_lock(lock, files["sock"], lock_wait_s):
        announce(f"hloc server: already running for this hloc ({files['sock']})")
        os.close(lock)
        return 0
    try:
        stop_stale_servers(os.path.dirname(files["sock"]), files["sock"], announce)
        warm_up()
        if threading.active_count() != 1:
            raise RuntimeError("a thread outlived the warm-up compile; refusing to fork")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(files["sock"])  # a dead server's: the lock says none runs
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(files["sock"])
        finally:
            os.umask(old_umask)
        listener.listen(128)
        server = Server(listener, files["stamp"], files["sock"], idle_timeout)
        announce(f"hloc server: running (pid {os.getpid()}, socket {files['sock']}, "
                 f"idle timeout {idle_timeout:g} s)")
        server.run()
        announce(f"hloc server: stopped ({server.stop_reason}) after {server.served} compile(s)")
        return 0
    finally:  # only the server reaches this (its children end in os._exit)
        with contextlib.suppress(OSError):
            os.unlink(files["sock"])  # ours: we hold the lock
        os.close(lock)


def stop_stale_servers(directory: str, ours: str, announce) -> None:
    """Ask the servers in `directory` that run this hloc directory under this Python, but from
    other sources (an edit, an upgrade in place), to stop: no client can use them again, and
    each would otherwise sit out its idle timeout. Servers of another hloc, Python or
    environment are left alone."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".sock"))
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        if path == ours:
            continue
        try:
            other = protocol.ask(path, {"op": "status"}, timeout=1.0)
        except (OSError, ValueError, ConnectionError):
            continue
        if (other.get("hloc") == PACKAGE_DIR and other.get("python") == sys.executable
                and other.get("sources") not in (None, SOURCES)):
            with contextlib.suppress(OSError, ValueError, ConnectionError):
                protocol.ask(path, {"op": "stop"}, timeout=1.0)
                announce(f"hloc server: stopped pid {other.get('pid')}, a server of this "
                         "hloc's earlier sources")


def main(argv: list[str] | None = None) -> int:
    """`python -c ... hloc.server.daemon.main([IDLE_TIMEOUT, "start"|"auto"])`: what `hloc
    server start` ("start") and a compile with HLOC_SERVER=auto ("auto": it does not wait for
    another server's start) run, detached, with their own sys.path already set."""
    args = sys.argv[1:] if argv is None else argv
    idle = float(args[0]) if args else protocol.IDLE_TIMEOUT_S
    auto = args[1:2] == ["auto"]
    with contextlib.suppress(OSError):
        os.chdir("/")  # keep no directory of the user's busy
    return serve(idle, announce=lambda line: print(line, file=sys.stderr, flush=True),
                 lock_wait_s=0.0 if auto else 10.0)
