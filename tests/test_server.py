"""The compile server (hloc.server): real servers started with `hloc server start` in a
private directory, real `hloc compile` clients (`python -m hloc`), their bundles compared
byte for byte with compiles in a process of their own."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hloc.server import protocol
from hloc.server.daemon import WARM_UP_MODULE

from .conftest import SAMPLES, require_samples

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs Unix sockets")


def command_env(server_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HLOC_SERVER")}
    env.update({"HLOC_SERVER_DIR": str(server_dir), "HLOC_SERVER": "use", "HLOC_CACHE_DIR": "off",
                **extra})
    return env


def hloc(env: dict, *args, cwd=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hloc", *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, **kw)


def status(env: dict) -> list[dict]:
    result = hloc(env, "server", "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


_SOCKETS: dict[str, str] = {}  # server directory -> the socket its clients use


def current(env: dict) -> dict:
    """The status of the server that `env`'s clients use: its socket found once with
    `hloc server status` (a process of its own), then asked directly."""
    directory = env["HLOC_SERVER_DIR"]
    path = _SOCKETS.get(directory)
    if path is None or not os.path.exists(path):
        (row,) = [row for row in status(env) if row["current"]]
        path = _SOCKETS[directory] = row["socket"]
    return protocol.ask(path, {"op": "status"})


def served(env: dict) -> int:
    return current(env)["served"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A running server and the environment its clients use. Its idle timeout outlasts the
    suite, as xdist may run this module's tests on a worker minutes apart; the teardown
    stops it."""
    directory = tmp_path_factory.mktemp("server") / "srv"
    env = command_env(directory)
    started = hloc(env, "server", "start", "--idle-timeout", "3600")
    assert started.returncode == 0, started.stderr
    assert "started" in started.stdout
    yield env
    hloc(env, "server", "stop")


def test_served_compile_is_byte_identical(server, tmp_path):
    require_samples()
    before = served(server)
    result = hloc(server, "compile", SAMPLES / "mlp.pb", "-o", tmp_path / "served.bundle")
    assert result.returncode == 0, result.stderr
    assert served(server) == before + 1  # it went through the server
    alone = hloc({**server, "HLOC_SERVER": "off"}, "compile", SAMPLES / "mlp.pb",
                 "-o", tmp_path / "alone.bundle")
    assert alone.returncode == 0, alone.stderr
    assert served(server) == before + 1  # HLOC_SERVER=off did not
    assert (tmp_path / "served.bundle").read_bytes() == (tmp_path / "alone.bundle").read_bytes()


def test_served_compile_runs_in_the_clients_directory_and_umask(server, tmp_path):
    require_samples()
    (tmp_path / "m.pb").write_bytes((SAMPLES / "mlp.pb").read_bytes())
    result = hloc(server, "compile", "m.pb", "-o", "out.bundle", cwd=tmp_path,
                  preexec_fn=lambda: os.umask(0o077))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE((tmp_path / "out.bundle").stat().st_mode) & 0o077 == 0


def test_served_errors_follow_the_contract(server, tmp_path):
    require_samples()
    bad = tmp_path / "truncated.pb"
    bad.write_bytes((SAMPLES / "mlp.pb").read_bytes()[:100])
    before = served(server)
    result = hloc(server, "compile", bad, "-o", tmp_path / "out.bundle")
    assert served(server) == before + 1
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and "truncated.pb" in lines[0], result.stderr
    assert not (tmp_path / "out.bundle").exists()
    assert list(tmp_path.iterdir()) == [bad]  # nothing half-written
    usage = hloc(server, "compile", SAMPLES / "mlp.pb")  # no -o
    assert usage.returncode == 2 and "Missing option" in usage.stderr


def test_one_worker_compiles_a_sequence_as_fresh_processes_would(server, tmp_path):
    """Compiles go to one worker, one after another (a bad input, an exit 2, does not end
    it), each in its own client's directory and environment; every bundle is the one a
    process of its own writes, byte for byte, and every client's pipes are left at their
    end of file (a worker holding them would leave hloc() waiting)."""
    require_samples()
    names = ["mlp", "sort", "top_k", "while_dynamic", "cnn", "fft"]
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"not a module")
    first = None
    for n, name in enumerate(names):
        cwd = tmp_path / name
        cwd.mkdir()
        extra = {"HLOC_COMPILE_THREADS": "1"} if n % 2 else {}
        result = hloc({**server, **extra}, "compile", SAMPLES / f"{name}.pb", "-o", "out.bundle",
                      "--no-cache", *(["--time-passes"] if n == 1 else []), cwd=cwd)
        assert result.returncode == 0, result.stderr
        if n == 1:
            assert "pass" in result.stderr  # the timing table reached this client's stderr
        worker = current(server)["worker"]
        assert worker is not None and worker == (first or worker)
        first = worker
        refused = hloc(server, "compile", bad, "-o", tmp_path / "bad.bundle")
        assert refused.returncode == 2 and "bad.pb" in refused.stderr
        alone = hloc({**server, "HLOC_SERVER": "off"}, "compile", SAMPLES / f"{name}.pb",
                     "-o", tmp_path / f"{name}.alone.bundle", "--no-cache")
        assert alone.returncode == 0, alone.stderr
        assert (cwd / "out.bundle").read_bytes() == (tmp_path / f"{name}.alone.bundle").read_bytes()
    assert current(server)["worker"] == first
    lines = hloc(server, "server", "status").stdout.splitlines()
    assert any("this hloc" in line and f"worker {first} " in line for line in lines), lines


def test_an_interrupted_compile_retires_the_worker(server, tmp_path):
    """Ctrl-C forwarded to a compile in the worker: the client says so in one line and exits
    130, and the next compile runs in a new worker."""
    fifo = tmp_path / "model.pb"
    os.mkfifo(fifo)
    warm = hloc(server, "compile", small_module(tmp_path), "-o", tmp_path / "w.bundle")
    assert warm.returncode == 0, warm.stderr
    worker = current(server)["worker"]
    proc = subprocess.Popen([sys.executable, "-m", "hloc", "compile", str(fifo), "-o",
                             str(tmp_path / "out.bundle")], env=server,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: running(server) == 1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130 and err == "hloc: interrupted\n"
    finally:
        proc.kill()
        proc.wait()
    wait_for(lambda: running(server) == 0)
    again = hloc(server, "compile", small_module(tmp_path), "-o", tmp_path / "w2.bundle")
    assert again.returncode == 0, again.stderr
    assert current(server)["worker"] not in (None, worker)
    assert (tmp_path / "w.bundle").read_bytes() == (tmp_path / "w2.bundle").read_bytes()


def test_an_idle_worker_is_let_go_and_its_state_put_back(monkeypatch):
    """In-process: a worker idle for worker.IDLE_S has its socket closed (it exits on the end
    of file); a compile's directory, environment, streams and logging are put back."""
    import logging

    from hloc.server import daemon, worker

    server = daemon.Server.__new__(daemon.Server)
    server.selector = selectors.DefaultSelector()
    ours, theirs = socket.socketpair()
    server.selector.register(ours, selectors.EVENT_READ, "worker")
    server.worker = daemon._Worker(12345, ours)
    assert 0 < server._worker_wait(None) <= worker.IDLE_S
    assert server.worker is not None
    server.worker.idle_since -= worker.IDLE_S + 1
    assert server._worker_wait(7.0) == 7.0
    assert server.worker is None and theirs.recv(1) == b""  # closed: the worker would stop

    monkeypatch.chdir("/")
    between = worker._Between()
    os.chdir(Path(__file__).parent)
    monkeypatch.setitem(os.environ, "HLOC_TEST_LEAK", "1")
    handler = logging.StreamHandler()
    logging.getLogger().addHandler(handler)
    for name in ("stdin", "stdout", "stderr"):
        monkeypatch.setattr(sys, name, getattr(sys, name))  # restore() opens new ones
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    try:
        between.restore()
        assert os.getcwd() == "/" and "HLOC_TEST_LEAK" not in os.environ
        assert handler not in logging.getLogger().handlers
        assert os.path.samestat(os.fstat(1), os.stat(os.devnull))
    finally:
        for fd, copy in zip((0, 1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def test_another_hloc_environment_gets_its_own_server(server, tmp_path):
    """HLOC_* variables are part of a server's identity: a client with other values does
    not use this one (it compiles in its own process), except for those a compile reads as
    it runs, which the child takes from the client."""
    require_samples()
    before = served(server)
    result = hloc({**server, "HLOC_CPU_GEMM": "blas"}, "compile", small_module(tmp_path),
                  "-o", tmp_path / "own.bundle")
    assert result.returncode == 0, result.stderr
    assert served(server) == before
    bundles = []
    for name, mode in (("served", "use"), ("alone", "off")):
        env = {**server, "HLOC_SERVER": mode, "HLOC_COMPILE_THREADS": "1",
               "HLOC_DUMP_DIR": str(tmp_path / f"dump-{name}")}
        result = hloc(env, "compile", SAMPLES / "mlp.pb", "-o", tmp_path / f"{name}.bundle")
        assert result.returncode == 0, result.stderr
        assert (tmp_path / f"dump-{name}" / "index.json").is_file()  # the client's dump dir
        bundles.append((tmp_path / f"{name}.bundle").read_bytes())
    assert served(server) == before + 1
    assert bundles[0] == bundles[1]


def test_stamp_follows_hloc_environment_not_server_settings(monkeypatch):
    base = protocol.stamp()
    monkeypatch.setenv("HLOC_SERVER_DIR", "/elsewhere")
    monkeypatch.setenv("HLOC_SERVER", "auto")
    assert protocol.stamp() == base
    monkeypatch.setenv("HLOC_DUMP_DIR", "/dumps")
    assert protocol.stamp() == base
    monkeypatch.setenv("HLOC_CPU_GEMM", "blas")
    assert protocol.stamp() != base
    monkeypatch.delenv("HLOC_CPU_GEMM")
    monkeypatch.setenv("PYTHONWARNINGS", "error")  # read by an interpreter as it starts
    assert protocol.stamp() != base


def test_stamp_follows_installs_not_new_files(tmp_path, monkeypatch):
    """Files appearing in a sys.path directory (a fresh venv's __pycache__, bundles written
    into a PYTHONPATH directory) leave the stamp alone; an installed distribution does not.
    (The first fresh-clone run of the suite had servers go stale this way.)"""
    monkeypatch.setattr(sys, "path", [sys.path[0], str(tmp_path), *sys.path[1:]])
    base = protocol.stamp()
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "out.bundle").write_bytes(b"x")
    assert protocol.stamp() == base
    (tmp_path / "numpy-9.9.dist-info").mkdir()
    assert protocol.stamp() != base


def test_signals_reach_the_compile_and_a_gone_client_stops_it(server, tmp_path):
    """The compile of a FIFO blocks until someone writes it: SIGTERM to the client ends it
    (exit 143, nothing written); a client killed outright has its compile stopped."""
    fifo = tmp_path / "model.pb"
    os.mkfifo(fifo)
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGKILL, -9)):
        proc = subprocess.Popen([sys.executable, "-m", "hloc", "compile", str(fifo), "-o",
                                 str(tmp_path / "out.bundle")], env=server,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: running(server) == 1)
            proc.send_signal(sig)
            assert proc.wait(timeout=30) == code
        finally:  # a client that compiled on its own would wait for a writer forever
            proc.kill()
            proc.wait()
        wait_for(lambda: running(server) == 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pb"]


def test_a_signal_between_request_and_answer_is_forwarded_not_fatal():
    """The server starts the compile before its answer reaches the client: a SIGTERM to the
    client in between must be held until the client forwards signals, then forwarded (the
    command exits 143 as the compile's owner), not end the client with the compile running.
    (The signal test above hit this window under load: the client died of the signal.)"""
    import threading

    from hloc.server import client

    ours, theirs = socket.socketpair()
    theirs.settimeout(5)
    main = threading.get_ident()
    seen = {}

    def fake_server():
        try:
            seen["request"], _ = protocol.recv(theirs, with_fds=3)
            signal.pthread_kill(main, signal.SIGTERM)  # the compile has started; no answer yet
            time.sleep(0.2)
            protocol.send(theirs, {"pid": 1})
            seen["forwarded"], _ = protocol.recv(theirs)
            protocol.send(theirs, {"signal": seen["forwarded"]["signal"]})
        finally:  # nothing forwarded: the client sees the server gone, not a hang
            theirs.shutdown(socket.SHUT_RDWR)

    handlers = {sig: signal.getsignal(sig) for sig in client.FORWARDED}
    signal.signal(signal.SIGTERM, lambda *_: seen.setdefault("not held", True))
    thread = threading.Thread(target=fake_server)
    thread.start()
    try:
        code = client._session(ours, ["compile", "x.hlo"], "test")
    finally:
        thread.join(10)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        ours.close()
        theirs.close()
    assert seen["request"]["op"] == "compile"
    assert "not held" not in seen
    assert seen["forwarded"] == {"signal": signal.SIGTERM}
    assert code == 128 + signal.SIGTERM
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_ctrl_c_before_the_server_answers_is_one_line_and_exit_130(monkeypatch, capsys):
    """A Ctrl-C held while the client waits for the server's answer is raised when the client
    gives up on it: the command says so in one line, as a compile in its own process does."""
    from hloc.cli import entry
    from hloc.server import client

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(client, "run_compile", interrupted)
    monkeypatch.setattr(sys, "argv", ["hloc", "compile", "m.hlo", "-o", "m.bundle"])
    with pytest.raises(SystemExit) as e:
        entry.main()
    assert e.value.code == 130
    assert capsys.readouterr().err == "hloc: interrupted\n"


def small_module(tmp_path: Path) -> Path:
    """A small HLO text module (the server's own warm-up module) for the tests of where a
    compile runs rather than what it produces."""
    path = tmp_path / "small.hlo"
    path.write_text(WARM_UP_MODULE)
    return path


def running(env: dict) -> int:
    return current(env)["running"]


def wait_for(condition, timeout: float = 30.0, show=lambda: None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out: {show()}"
        time.sleep(0.05)


def test_bad_requests_leave_the_server_running(server):
    mine = current(server)
    deep = b"[" * 200_000
    for payload in (b"\x00\x00\x00\x05junk!", b"\xff\xff\xff\xff", b"",
                    len(deep).to_bytes(4, "big") + deep):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(mine["socket"])
            s.sendall(payload)
    for request in ({"op": "compile", "v": protocol.PROTOCOL, "argv": ["inspect", "x"],
                     "cwd": "/", "env": {}, "streams": []},
                    {"op": "compile", "v": protocol.PROTOCOL + 1},
                    {"op": "nonsense"}):
        answer = protocol.ask(mine["socket"], request)
        assert "error" in answer
    assert served(server) >= 0 and running(server) == 0


MESSAGES = [
    {"op": "compile", "v": 1, "argv": ["compile", "a b.pb", "é\u2028\n\"\\"], "cwd": "/tmp",
     "env": {"A": "x\x00y", "B": "\udcff", "": ""}, "umask": 0o22, "streams": [0, 1, 2]},
    {"pid": 123}, {"exit": 0}, {"signal": 15}, {},
    {"started": 1764190000.25, "idle_timeout": float("inf"), "none": None, "yes": True,
     "no": False, "big": 2**70, "neg": -3, "nested": [[], {}, [1, [2.5, "x"]]]},
]


@pytest.mark.parametrize("message", MESSAGES)
def test_the_wire_format_is_json(message):
    """The client's codec (json's C half, without `json` and the `re` it imports) writes
    what json.loads reads, and reads what json.dumps writes."""
    assert json.loads(protocol.encode(message)) == message
    assert protocol.decode(json.dumps(message).encode()) == message
    assert protocol.decode(protocol.encode(message)) == message


@pytest.mark.parametrize("data", [b"", b"{", b"[1,", b'{"a": 1} x', b"\xff\xfe", b"nul",
                                  b'{"a" 1}', b"[" * 100_000, b'{"a": 01}', b"'x'"])
def test_the_wire_format_refuses_what_json_refuses(data):
    with pytest.raises((ValueError, RecursionError)):  # json: RecursionError for the nesting
        json.loads(data)
    with pytest.raises(ValueError):  # one error for the server to answer
        protocol.decode(data)


def test_a_served_compile_imports_nothing_heavy_before_the_server_answers():
    """What the `hloc` command imports before it reaches a server: not click, json, re,
    enum, socket, array or anything of the compiler (each costs a served compile time)."""
    code = ("import sys; from hloc.cli import entry; from hloc.server import client; "
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    heavy = {"click", "json", "re", "enum", "socket", "array", "numpy", "hloc.compiler",
             "hloc.ir", "google.protobuf", "llvmlite"}
    assert not loaded & heavy, loaded & heavy


def test_no_server_a_stale_socket_or_an_unsafe_directory_compiles_here(tmp_path):
    directory = tmp_path / "srv"
    env = command_env(directory)
    out = tmp_path / "out.bundle"
    model = small_module(tmp_path)
    assert hloc(env, "compile", model, "-o", out).returncode == 0  # none runs
    directory.mkdir(mode=0o700)
    ident = subprocess.run([sys.executable, "-c", "from hloc.server import protocol; "
                            "print(protocol.stamp())"], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    with socket.socket(socket.AF_UNIX) as s:  # a dead server's socket: nobody listens
        s.bind(str(directory / f"{ident}.sock"))
    result = hloc(env, "compile", model, "-o", out)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    directory.chmod(0o755)
    assert hloc(env, "compile", model, "-o", out).returncode == 0
    refused = hloc(env, "server", "start")
    assert refused.returncode == 2
    assert "mode 755" in refused.stderr and "0700" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_default_starts_a_server_after_compiling_here_then_idle_timeout_and_stop(tmp_path):
    """By default (HLOC_SERVER unset: auto) a compile that finds no server compiles in its
    own process, then starts one in the background; the next compile is served. A server
    stops when told, or after its idle timeout (status asks do not count as activity)."""
    require_samples()
    env = command_env(tmp_path / "srv")
    del env["HLOC_SERVER"]
    try:
        default_start_idle_timeout_and_stop(env, tmp_path)
    finally:
        hloc(env, "server", "stop", "--all")


def default_start_idle_timeout_and_stop(env: dict, tmp_path: Path) -> None:
    first = hloc(env, "compile", SAMPLES / "mlp.pb", "-o", tmp_path / "a.bundle")
    assert first.returncode == 0, first.stderr
    wait_for(lambda: any(r["current"] for r in status(env)))  # started in the background
    assert served(env) == 0
    assert hloc(env, "compile", SAMPLES / "mlp.pb", "-o", tmp_path / "b.bundle").returncode == 0
    assert served(env) == 1
    assert (tmp_path / "a.bundle").read_bytes() == (tmp_path / "b.bundle").read_bytes()
    stopped = hloc(env, "server", "stop")
    assert "stopping" in stopped.stdout
    wait_for(lambda: status(env) == [])
    use = hloc({**env, "HLOC_SERVER": "use"}, "compile", SAMPLES / "mlp.pb", "-o",
               tmp_path / "c.bundle")
    assert use.returncode == 0, use.stderr
    time.sleep(0.5)
    assert status(env) == []  # HLOC_SERVER=use started none
    short = hloc(env, "server", "start", "--idle-timeout", "0.5")
    assert short.returncode == 0, short.stderr
    wait_for(lambda: status(env) == [], timeout=30, show=lambda: status(env))  # gone by itself
    assert hloc(env, "server", "stop").stdout.strip() == "hloc server: none running"


def test_an_unknown_hloc_server_mode_is_one_line_and_exit_2(tmp_path):
    result = hloc({**command_env(tmp_path / "srv"), "HLOC_SERVER": "maybe"}, "compile",
                  SAMPLES / "mlp.pb", "-o", tmp_path / "x.bundle")
    assert result.returncode == 2
    assert result.stderr.strip() == ("hloc compile: error: HLOC_SERVER='maybe': expected auto "
                                     "(the default), use or off")
    assert not (tmp_path / "x.bundle").exists() and not (tmp_path / "srv").exists()


def test_a_new_server_stops_the_servers_of_earlier_sources_only(tmp_path):
    """A server starting for this hloc asks servers of the same hloc directory and Python
    but other sources (an edit or an in-place upgrade: no client can reach them again) to
    stop, and leaves others (another hloc, another Python, the same sources) alone."""
    import threading

    from hloc.server import daemon
    from hloc.util.sources import PACKAGE_DIR

    directory = tmp_path / "srv"
    directory.mkdir(mode=0o700)
    kinds = {"stale": {"sources": "deadbeef"},
             "current": {"sources": daemon.SOURCES},
             "other_hloc": {"sources": "deadbeef", "hloc": "/elsewhere/hloc"},
             "other_python": {"sources": "deadbeef", "python": "/usr/bin/python9"}}
    asked: dict[str, list[str]] = {name: [] for name in kinds}
    listeners = []

    def answer(listener, name):
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                message, _ = protocol.recv(conn)
                asked[name].append(message["op"])
                protocol.send(conn, {"pid": 1, "hloc": PACKAGE_DIR, "python": sys.executable,
                                     **kinds[name]})

    for name in kinds:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(directory / f"{name}.sock"))
        listener.listen(4)
        listeners.append(listener)
        threading.Thread(target=answer, args=(listener, name), daemon=True).start()
    lines: list[str] = []
    try:
        daemon.stop_stale_servers(str(directory), str(directory / "ours.sock"), lines.append)
    finally:
        for listener in listeners:
            listener.close()
    assert asked == {"stale": ["status", "stop"], "current": ["status"],
                     "other_hloc": ["status"], "other_python": ["status"]}
    assert lines == ["hloc server: stopped pid 1, a server of this hloc's earlier sources"]


def test_concurrent_clients_each_get_their_own_compile(server, tmp_path):
    model = small_module(tmp_path)
    before = served(server)
    procs = [subprocess.Popen([sys.executable, "-m", "hloc", "compile", str(model), "-o",
                               str(tmp_path / f"{n}.bundle")], env=server,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for n in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    assert served(server) == before + 4
    alone = hloc({**server, "HLOC_SERVER": "off"}, "compile", model, "-o", tmp_path / "x.bundle")
    assert alone.returncode == 0, alone.stderr
    want = (tmp_path / "x.bundle").read_bytes()
    assert all((tmp_path / f"{n}.bundle").read_bytes() == want for n in range(4))


def test_foreground_server_stops_on_sigterm(tmp_path):
    env = command_env(tmp_path / "srv")
    proc = subprocess.Popen([sys.executable, "-m", "hloc", "server", "start", "--foreground"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: any(r["current"] for r in status(env)), timeout=60)
        result = hloc(env, "compile", small_module(tmp_path), "-o", tmp_path / "out.bundle")
        assert result.returncode == 0, result.stderr
        assert served(env) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert "running (pid" in proc.stdout.read()
    assert status(env) == [] and not list((tmp_path / "srv").glob("*.sock"))


def test_a_server_that_does_not_answer_is_left_with_a_warning(tmp_path, monkeypatch, capsys):
    """A socket that accepts but never answers (a stopped or wedged server): the client warns
    and returns None, so the command compiles in its own process."""
    from hloc.server import client

    directory = tmp_path / "srv"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("HLOC_SERVER_DIR", str(directory))
    monkeypatch.setenv("HLOC_SERVER", "")
    monkeypatch.setattr(client, "ACK_TIMEOUT_S", 0.3)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(directory / f"{protocol.stamp()}.sock"))
        listener.listen(1)
        assert client.run_compile(["compile", "x.hlo", "-o", "x.bundle"]) is None
    err = capsys.readouterr().err
    assert "did not answer in time" in err and "compiling in this process" in err


@pytest.mark.parametrize("args, fragment", [
    (["--idle-timeout", "nan"], "--idle-timeout must be"),
    (["--idle-timeout", "-1"], "--idle-timeout must be"),
    ([], "socket path too long"),
])
def test_start_refuses_bad_settings_in_one_line(tmp_path, args, fragment):
    directory = tmp_path / ("d" * 100 if not args else "srv")
    result = hloc(command_env(directory), "server", "start", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr


def test_start_waits_for_a_server_that_is_still_stopping(tmp_path):
    """A server removes its socket first and its lock last: a start in between waits for the
    lock instead of reporting "already running" for a server that is going away."""
    import fcntl

    directory = tmp_path / "srv"
    directory.mkdir(mode=0o700)
    env = command_env(directory)
    ident = subprocess.run([sys.executable, "-c", "from hloc.server import protocol; "
                            "print(protocol.stamp())"], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    with open(directory / f"{ident}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a stopping server: lock held, no socket
        start = subprocess.Popen([sys.executable, "-m", "hloc", "server", "start",
                                  "--idle-timeout", "60"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        fcntl.flock(held, fcntl.LOCK_UN)
    try:
        out, err = start.communicate(timeout=60)
        assert start.returncode == 0, err
        assert "started" in out
        assert served(env) == 0
    finally:
        hloc(env, "server", "stop")
