"""`hlo-run --processes N`: start N ranks of `hlo-run` through the environment's `mpiexec`.

The ranks run `python -m hloc.cli.run` with the same arguments (less `--processes`) under
`mpiexec -n N`, exactly as `mpiexec -n N hlo-run ...` would. The mpiexec next to the running
interpreter (the virtualenv's, from the `mpich` wheel) is preferred over one on PATH, so
the launcher and the ranks' mpi4py use the same MPI. Rank 0 prints; the exit status is the
job's. When a rank fails, every rank of the job is ended (MPI_Abort) and the failing rank's
one-line error is printed once, without the launcher's own abort banner.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..collectives.mpi import INSTALL_HINT, MPICH_YIELD_ENV, MissingMpiError
from ..errors import InputError
from .common import RANK_MESSAGES_ENV


def find_mpiexec() -> str | None:
    """The virtualenv's mpiexec (next to sys.executable), else the first one on PATH."""
    local = Path(sys.executable).parent / "mpiexec"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("mpiexec")


def strip_processes(argv: list[str]) -> list[str]:
    """`argv` without `--processes N` / `--processes=N`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--processes":
            skip = True
        elif not a.startswith("--processes="):
            out.append(a)
    return out


def _command(n: int, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    mpiexec = find_mpiexec()
    if mpiexec is None or importlib.util.find_spec("mpi4py") is None:
        what = "mpiexec" if mpiexec is None else "mpi4py"
        raise MissingMpiError(f"--processes needs MPI ({what} not found next to "
                              f"{sys.executable} or on PATH): {INSTALL_HINT}")
    env = dict(os.environ)
    for k, v in MPICH_YIELD_ENV.items():
        env.setdefault(k, v)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Open MPI's mpiexec refuses root (containers, CI images) unless both are set; the
        # user asked for the launch, and MPICH ignores them.
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # The ranks must import this hloc, installed or not (mpiexec passes the environment on).
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return [mpiexec, "-n", str(n), sys.executable, "-m", "hloc.cli.run", *argv], env


def _report(stderr: str, rc: int, left: str = "") -> None:
    """Pass the ranks' stderr on; after a failure, only hlo-run's own lines, each once (the
    failing rank's line, not mpiexec's abort banner), or mpiexec's if there are none. `left`:
    the lines the ranks left in the message directory, for those mpiexec did not forward."""
    if rc == 0:
        sys.stderr.write(stderr)
        return
    ours = list(dict.fromkeys(ln for ln in (stderr + "\n" + left).splitlines()
                              if ln.startswith("hlo-run:")))
    errors = [ln for ln in ours if ": error:" in ln or "internal error" in ln]
    if errors:
        ours = [ln for ln in ours if ln not in errors[1:]]  # the first error line, once
        sys.stderr.write("\n".join(ours) + "\n")
        return
    tail = [ln for ln in stderr.splitlines() if ln.strip()][-5:]
    sys.stderr.write(f"hlo-run: error: a rank ended without a message (exit status {rc}); "
                     f"mpiexec said: {' | '.join(tail) or 'nothing'}\n")


def launch(n: int, argv: list[str]) -> int:
    """Run `hlo-run ARGV` as `n` MPI ranks; the job's exit status. (The CLI passes its own
    command line, sys.argv[1:]: click keeps no copy of the raw arguments.)"""
    if n < 1:
        raise InputError(f"--processes wants a positive count, got {n}")
    cmd, env = _command(n, strip_processes(argv))
    with tempfile.TemporaryDirectory(prefix="hloc-ranks-") as messages:
        env[RANK_MESSAGES_ENV] = messages
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
        try:
            _, stderr = proc.communicate()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            return 130
        left = "".join(p.read_text(errors="replace") for p in sorted(Path(messages).iterdir()))
    _report(stderr, proc.returncode, left)
    return proc.returncode
