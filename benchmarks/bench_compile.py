"""`hloc compile` as a whole command (a new process: Python start, imports, compile, write)
against XLA's compile of the same module, over the samples (samples/NAME.pb).

First, what a user gets by default (HLOC_SERVER unset: auto) with no server running: every
sample compiled once in a row (`--no-cache`); the first compiles in its own process and
starts a server as it exits, the next are served once that server is up ("default").
Then per sample: the fastest of `--repeat` cold compiles (`--no-cache`, no compile server
running), the fastest of as many compile-cache hits (the cache in a temporary directory,
filled by one untimed compile, which also writes the bytecode), then, with a compile server
started for the rest of the run (`hloc server start`), the fastest of as many `--no-cache`
compiles it serves ("server"), and XLA:CPU's compile of the same HloModuleProto (the fastest of
three, in the jax venv's warm process: benchmarks/xla_worker.py via JAXENV; empty without
one). Then geometric means, and the ratio of hloc's whole command to XLA's compile (issue
16's goal: at most 1.5, and at most 0.25 s for a small module).

    .venv/bin/python benchmarks/bench_compile.py [-k SUBSTR] [--repeat 3] [--no-xla]
        [--cpu x86-64-v3]   # compile for that level, XLA restricted the same way (bench_cpu)
        [--root CHECKOUT]   # time another checkout's hloc (e.g. a baseline) with this script
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))


def hloc_command(root: Path, args: list[str], env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of one `hloc ARGS` process (run from `root`, so that its hloc is
    the one run). CPU time (user + system, all threads) is steadier on a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", _entry(root), *args], cwd=root, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _entry(root: Path) -> str:
    """The `hloc` command's module (a checkout from before the compile server: its CLI)."""
    return "hloc" if (root / "hloc" / "__main__.py").exists() else "hloc.cli.main"


def has_server(root: Path) -> bool:
    return (root / "hloc" / "server").is_dir()


def fastest(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return min(w for w, _ in runs), min(c for _, c in runs)


def command_env(root: Path, tmp: Path, server: str | None, where: str = "server") -> dict:
    """A command's environment: HLOC_SERVER=`server` (None: unset, the default), its servers
    in tmp/`where`."""
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("HLOC_")}
    env.update(PYTHONPATH=str(root), HLOC_CACHE_DIR=str(tmp / "cache"),
               HLOC_SERVER_DIR=str(tmp / where))
    if server is not None:
        env["HLOC_SERVER"] = server
    return env


def default_sequence(root: Path, jobs: list[dict], tmp: Path, cpu: str | None) -> dict:
    """Each sample compiled once, in order, as a user's commands run by default from no
    server (see the module docstring): {"times": {name: wall}, "served": compiles served}."""
    env = command_env(root, tmp, None, where="default-server")
    level = ["--cpu", cpu] if cpu else []
    times = {}
    try:
        for job in jobs:
            out = str(tmp / f"{job['name']}.default.bundle")
            times[job["name"]] = hloc_command(root, ["compile", job["pb"], "-o", out,
                                                     "--no-cache", *level], env)[0]
        served = _served(root, env)
    finally:
        subprocess.run([sys.executable, "-m", _entry(root), "server", "stop", "--all"], cwd=root,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"times": times, "served": served}


def _served(root: Path, env: dict) -> int:
    """Compiles served by the servers in env's server directory."""
    import json

    if not has_server(root):
        return 0
    out = subprocess.run([sys.executable, "-m", _entry(root), "server", "status", "--json"],
                         cwd=root, env=env, capture_output=True, text=True, check=True).stdout
    return sum(row["served"] for row in json.loads(out))


def time_sample(root: Path, pb: Path, tmp: Path, repeat: int, cpu: str | None = None) -> dict:
    """The fastest whole-command compile without the cache or a server ("cold") and from the
    cache ("hit"), wall and CPU ("cold_cpu", "hit_cpu"). Run with no server up: a server's
    worker tidying up after a served compile would share the cores with the next cold one."""
    env = command_env(root, tmp, "off")
    out = str(tmp / f"{pb.stem}.bundle")
    level = ["--cpu", cpu] if cpu else []
    hloc_command(root, ["compile", str(pb), "-o", out, *level], env)  # fills the cache, .pyc
    cold = fastest([hloc_command(root, ["compile", str(pb), "-o", out, "--no-cache", *level], env)
                    for _ in range(repeat)])
    hit = fastest([hloc_command(root, ["compile", str(pb), "-o", out, *level], env)
                   for _ in range(repeat)])
    return {"cold": cold[0], "cold_cpu": cold[1], "hit": hit[0], "hit_cpu": hit[1]}


def time_served(root: Path, pb: Path, tmp: Path, repeat: int, cpu: str | None = None) -> dict:
    """The fastest of `repeat` `--no-cache` compiles served by the running server ("server"),
    wall and the client's CPU ("server_cpu": the compile runs in the server's worker, not in
    a child of this process)."""
    out = str(tmp / f"{pb.stem}.served.bundle")
    level = ["--cpu", cpu] if cpu else []
    server = fastest([hloc_command(root, ["compile", str(pb), "-o", out, "--no-cache", *level],
                                   command_env(root, tmp, "use")) for _ in range(repeat)])
    return {"server": server[0], "server_cpu": server[1]}


def xla_compile_times(jobs: list[dict], tmp: Path, env: dict | None = None) -> dict[str, float]:
    """XLA's compile time per sample (empty without a jax venv); `env`: its worker's."""
    from bench_cpu import XlaWorker

    worker = XlaWorker(tmp, 0.0, env)
    times = {}
    try:
        for job in jobs:
            answer = worker.run(job)
            if "compile_s" in answer:
                times[job["name"]] = answer["compile_s"]
    finally:
        worker.close()
    return times


def report(names: list[str], ours: dict, xla: dict, default: dict) -> None:
    from bench_cpu import geomean

    nan = float("nan")
    print(f"{'sample':<22} {'cold s':>7} {'cpu s':>7} {'server s':>8} {'cli cpu':>7} {'hit s':>7} "
          f"{'cpu s':>7} {'xla s':>7} {'cold/xla':>8} {'srv/xla':>8}")
    for name in names:
        o, x = ours[name], xla.get(name)
        ratios = [f"{o[k] / x:>8.2f}" if x and k in o else f"{'-':>8}" for k in ("cold", "server")]
        print(f"{name[:22]:<22} {o['cold']:>7.3f} {o['cold_cpu']:>7.3f} "
              f"{o.get('server', nan):>8.3f} {o.get('server_cpu', nan):>7.3f} {o['hit']:>7.3f} "
              f"{o['hit_cpu']:>7.3f} {x if x else nan:>7.3f} {ratios[0]} {ratios[1]}")

    def mean(key: str) -> float:
        return geomean([ours[n][key] for n in names]) if all(key in ours[n] for n in names) else nan

    def over_xla(key: str) -> str:
        both = [n for n in names if n in xla and key in ours[n]]
        return f"{geomean([ours[n][key] / xla[n] for n in both]):.2f}" if both else "-"

    print(f"geomean over {len(names)} samples: cold {mean('cold'):.3f} s "
          f"(CPU {mean('cold_cpu'):.3f} s), server {mean('server'):.3f} s "
          f"(client CPU {mean('server_cpu'):.3f} s), cache hit {mean('hit'):.3f} s "
          f"(CPU {mean('hit_cpu'):.3f} s)"
          + (f", xla {geomean(list(xla.values())):.3f} s, cold/xla {over_xla('cold')}, "
             f"server/xla {over_xla('server')}" if xla else ""))
    times = default["times"]
    both = [n for n in names if n in xla]
    print(f"by default (HLOC_SERVER unset), the {len(names)} samples compiled once each in a row "
          f"from no server: geomean {geomean([times[n] for n in names]):.3f} s"
          + (f", {geomean([times[n] / xla[n] for n in both]):.2f} x XLA" if both else "")
          + f"; the first ({names[0]}) {times[names[0]]:.3f} s; {default['served']} of "
          f"{len(names)} served")


def server_command(root: Path, tmp: Path, what: str) -> None:
    """`hloc server start|stop` for the timed hloc (its own server directory under tmp)."""
    if has_server(root):
        subprocess.run([sys.executable, "-m", _entry(root), "server", what], cwd=root,
                       env=command_env(root, tmp, "use"), check=True,
                       stdout=subprocess.DEVNULL)


def main(argv=None) -> int:
    from bench_cpu import sample_jobs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only samples whose name contains this")
    ap.add_argument("--repeat", type=int, default=3, help="compiles per measurement (fastest)")
    ap.add_argument("--no-xla", action="store_true", help="skip XLA's compile times")
    ap.add_argument("--root", type=Path, default=ROOT, help="the hloc checkout to time")
    ap.add_argument("--cpu", default=os.environ.get("HLOC_BENCH_CPU") or None,
                    help="compile for this x86-64 level (x86-64-v3: AVX2), XLA restricted alike")
    args = ap.parse_args(argv)
    from bench_cpu import restrict_to_level

    xla_env = restrict_to_level(args.cpu)
    jobs = [j for j in sample_jobs(False) if args.k in j["name"]]
    root = args.root.resolve()
    with tempfile.TemporaryDirectory(prefix="hloc-bench-compile-") as d:
        tmp = Path(d)
        ours = {}
        hloc_command(root, ["--version"], command_env(root, tmp, "off"))  # writes the .pyc
        default = default_sequence(root, jobs, tmp, args.cpu)
        for job in jobs:
            ours[job["name"]] = time_sample(root, Path(job["pb"]), tmp, args.repeat, args.cpu)
            print(f"  {job['name']}: {ours[job['name']]}", file=sys.stderr, flush=True)
        if has_server(root):
            server_command(root, tmp, "start")
            try:
                for job in jobs:
                    ours[job["name"]].update(time_served(root, Path(job["pb"]), tmp,
                                                         args.repeat, args.cpu))
            finally:
                server_command(root, tmp, "stop")
        xla = {} if args.no_xla else xla_compile_times(jobs, tmp, xla_env)
    report([j["name"] for j in jobs], ours, xla, default)
    return 0


if __name__ == "__main__":
    sys.exit(main())
