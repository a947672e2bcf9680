"""Where a compile server lives, which hloc it is, and the messages on its socket.

Kept to the standard library's cheapest modules (os, _signal, _socket, struct, zlib, and
json's C half `_json`): the client side runs before any of hloc's compiler is imported.
`socket` alone (its enums) would cost a compile through the server 6 ms, and `json` (which
imports `re` and `enum`) 17 ms; `array` another 1 ms.

A server is identified by a stamp of everything that decides what a compile imports and
produces: the Python executable and version, `sys.path` (PYTHONPATH, the venv) with the
distributions installed in each of its directories (an install, upgrade or removal changes
them; the first entry, the command's own directory, is left out),
hloc's own sources (path, size, mtime), the HLOC_* environment (some of it is read when a
module is imported; READ_AT_RUN_TIME lists the variables that are not, which the child takes
from the client like the rest of its environment) and the PYTHON* variables (PYTHONWARNINGS,
PYTHONHASHSEED, ...: the interpreter reads them when it starts, and a child never starts). A client only talks to the server with its own stamp; any other serves
someone else and is never used.

Files, in the server directory (mode 0700, owned by the user; refused otherwise):
`STAMP.sock` (the socket), `STAMP.lock` (held with flock for the server's life: "running"),
`STAMP.log` (the server's own stderr: start-up failures).

Messages: a 4-byte big-endian length and that many bytes of JSON. A compile request carries
the client's standard streams as SCM_RIGHTS file descriptors.
"""

from __future__ import annotations

import _signal
import _socket
import os
import struct
import sys
import zlib

try:
    import _json  # the C half of `json`: its encoder of strings and its scanner
except ImportError:  # another Python: the json module, at its import cost
    _json = None

from ..util.sources import PACKAGE_DIR, source_files, stat_listing

PROTOCOL = 1
IDLE_TIMEOUT_S = 900.0  # a server's default: `hloc server start`'s and an auto-started one's
MAX_MESSAGE = 16 << 20  # a request carries the environment and argv: far below this
SOCKET_PATH_MAX = 107  # sockaddr_un's sun_path, less its terminating NUL
# The signals a client forwards to its compile (and the server's children take over).
FORWARDED_SIGNALS = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT)


class ServerDirError(Exception):
    """The server directory cannot be used safely (wrong owner or mode, not a directory)."""


def server_dir() -> str:
    """HLOC_SERVER_DIR, else $XDG_RUNTIME_DIR/hloc, else /tmp/hloc-server-UID."""
    explicit = os.environ.get("HLOC_SERVER_DIR")
    if explicit:
        return os.path.abspath(explicit)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "hloc")
    return f"/tmp/hloc-server-{os.getuid()}"


def checked_dir(create: bool) -> str:
    """The server directory, after checking that only this user can reach into it (a socket
    there runs compiles as whoever started the server). Raises ServerDirError."""
    path = server_dir()
    if create:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as e:
            raise ServerDirError(f"{path}: cannot create the server directory: "
                                 f"{e.strerror or e}") from None
    try:
        st = os.lstat(path)
    except OSError as e:
        raise ServerDirError(f"{path}: {e.strerror or e}") from None
    if not os.path.isdir(path) or os.path.islink(path):
        raise ServerDirError(f"{path}: not a directory")
    if st.st_uid != os.getuid():
        raise ServerDirError(f"{path}: owned by uid {st.st_uid}, not by this user "
                             f"({os.getuid()}); refusing to use it")
    if st.st_mode & 0o077:
        raise ServerDirError(f"{path}: mode {st.st_mode & 0o777:o} lets others in; "
                             "it must be 0700")
    return path


def _path_entries() -> list[tuple[str, list[str] | None]]:
    """sys.path after its first entry (which is where the command started from: the `hloc`
    script's directory, the working directory of `python -m hloc`; hloc's own directory is
    stamped separately), each with the distributions installed there (their `.dist-info`
    and `.egg-info` names carry the versions). Not the directories' modification times:
    those change whenever a file appears there (a `__pycache__` on a fresh venv's first
    imports, a bundle written into a PYTHONPATH directory), and a server would go stale
    after one compile."""
    entries: list[tuple[str, list[str] | None]] = []
    for entry in sys.path[1:]:
        try:
            names = sorted(n for n in os.listdir(entry or ".")
                           if n.endswith((".dist-info", ".egg-info")))
        except OSError:  # a zip file, a path hook's name, a missing directory
            names = None
        entries.append((entry, names))
    return entries


# HLOC_* variables that a compile reads when it runs (never at import, never memoized): a
# child has the client's, so they need no server of their own.
READ_AT_RUN_TIME = frozenset({"HLOC_CACHE_DIR", "HLOC_DUMP_DIR", "HLOC_DEBUG",
                              "HLOC_COMPILE_THREADS"})


def stamp() -> str:
    """This process's server identity (see the module docstring): 16 hex digits."""
    env = sorted((k, v) for k, v in os.environ.items()
                 if (k.startswith("HLOC_") and not k.startswith("HLOC_SERVER")
                     and k not in READ_AT_RUN_TIME)
                 or k.startswith("PYTHON"))  # the interpreter's own settings, read at its start
    text = repr((PROTOCOL, sys.executable, sys.version, _path_entries(), env,
                 PACKAGE_DIR, stat_listing(source_files()))).encode()
    return f"{zlib.crc32(text):08x}{zlib.adler32(text[::-1]):08x}"


def server_files(create: bool) -> dict[str, str]:
    """This process's server: its "stamp" and its files ("sock", "lock", "log") in the
    checked server directory (created when `create`). Raises ServerDirError for an unsafe
    directory or a socket path too long for a Unix socket."""
    directory, ident = checked_dir(create), stamp()
    files = {kind: os.path.join(directory, f"{ident}.{kind}") for kind in ("sock", "lock", "log")}
    if len(files["sock"].encode()) > SOCKET_PATH_MAX:
        raise ServerDirError(f"{files['sock']}: socket path too long for a Unix socket; set "
                             "HLOC_SERVER_DIR to a shorter directory")
    return {"stamp": ident, **files}


def encode(value) -> bytes:
    """JSON of a message (dicts with string keys, lists, tuples, strings, integers, floats,
    booleans, None), as `json.dumps` reads it back."""
    if _json is None:
        import json

        return json.dumps(value).encode()
    out: list[str] = []
    _encode(value, out)
    return "".join(out).encode()


def _encode(value, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_json.encode_basestring_ascii(value))
    elif value is None or isinstance(value, bool):
        out.append({None: "null", True: "true", False: "false"}[value])
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(float.__repr__(value) if value == value and abs(value) != float("inf")
                   else "NaN" if value != value else "Infinity" if value > 0 else "-Infinity")
    elif isinstance(value, dict):
        out.append("{")
        for n, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"a message's keys are strings, not {type(key).__name__}")
            out.append("," if n else "")
            out.append(_json.encode_basestring_ascii(key))
            out.append(":")
            _encode(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for n, item in enumerate(value):
            out.append("," if n else "")
            _encode(item, out)
        out.append("]")
    else:
        raise TypeError(f"a message cannot hold a {type(value).__name__}")


class _ScanSettings:
    """What json's C scanner reads from a JSONDecoder: json.loads' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod({"NaN": float("nan"), "Infinity": float("inf"),
                                   "-Infinity": float("-inf")}.__getitem__)


_scan = _json.make_scanner(_ScanSettings) if _json is not None else None  # type: ignore[arg-type]


def decode(data: bytes):
    """The value of a JSON message; ValueError when it is not one (as json.loads)."""
    if _scan is None:
        import json

        return json.loads(data)
    try:
        text = data.decode()
        value, end = _scan(text, 0)
    except StopIteration as e:
        raise ValueError(f"not JSON (at character {e.value})") from None
    except (RecursionError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON ({e})") from None
    if text[end:].strip(" \t\r\n"):
        raise ValueError(f"not JSON: extra data at character {end}")
    return value


def send(sock, message: dict, fds: list[int] | None = None) -> None:
    """One message on `sock` (a socket.socket or _socket.socket), with `fds` attached."""
    data = encode(message)
    frame = struct.pack(">I", len(data)) + data
    if fds:
        ancillary = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                      struct.pack(f"{len(fds)}i", *fds))]
        sent = sock.sendmsg([frame], ancillary)
        frame = frame[sent:]
    if frame:
        sock.sendall(frame)


def _recv_exact(sock, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


_INT = struct.calcsize("i")


def _recv_fds(sock, size: int, most: int) -> tuple[bytes, list[int]]:
    data, ancillary, _flags, _addr = sock.recvmsg(size, _socket.CMSG_LEN(most * _INT))
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            count = len(payload) // _INT
            fds += struct.unpack(f"{count}i", payload[:count * _INT])
    return data, fds


def recv(sock, with_fds: int = 0) -> tuple[dict, list[int]]:
    """One message (and up to `with_fds` file descriptors sent with its first bytes)."""
    fds: list[int] = []
    if with_fds:
        head, fds = _recv_fds(sock, 4, with_fds)
        if not head:
            raise ConnectionError("the other side closed the connection")
        head += _recv_exact(sock, 4 - len(head)) if len(head) < 4 else b""
    else:
        head = _recv_exact(sock, 4)
    (size,) = struct.unpack(">I", head)
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes: too large")
    message = decode(_recv_exact(sock, size))
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    return message, fds


def connect(path: str, timeout: float):
    """A _socket.socket connected to the server at `path` (OSError when none listens)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def ask(path: str, message: dict, timeout: float = 5.0) -> dict:
    """A one-question exchange with the server at `path` (status, stop)."""
    sock = connect(path, timeout)
    try:
        send(sock, message)
        return recv(sock)[0]
    finally:
        sock.close()
