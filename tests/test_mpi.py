"""Multi-process runs with a real mpiexec (issue 13, phase 2a): interpreter bundles of every
partitioned sample as 2 and 4 MPI ranks match XLA's global outputs, deterministic mode is
bit-identical to the in-process run_spmd, `hlo-run --processes N` and `mpiexec -n N hlo-run`
work like one-device runs, and faults (a rank that dies, a stuck collective, mismatched
bundles or options, a wrong rank count) end the job in bounded time with one clear line.
cpu bundles run as ranks; cuda-emulated ones run their collectives through the NCCL mapping
on the emulated NCCL (hloc.runtime.cuda.nccl), which tests/mpi_worker.py also checks
against NCCL's definition.

Skipped without mpi4py/mpiexec locally; in CI (CI=true) their absence is a failure."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hloc.cli.launch import find_mpiexec

from .conftest import IN_CI

ROOT = Path(__file__).resolve().parent.parent
SPMD = ROOT / "samples" / "spmd"
FOUR = ["jit_sharded_matmul", "dp_train_step", "mesh2d_transformer", "shard_map_collectives"]
TWO = "shard_map_2dev"


def _mpi_available() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return find_mpiexec() is not None


if not _mpi_available():
    if IN_CI:
        raise RuntimeError("CI must run the MPI tests: install hloc[dist] (mpi4py, mpich)")
    pytest.skip("mpi4py / mpiexec not installed (pip install 'hloc[dist]')",
                allow_module_level=True)

pytestmark = pytest.mark.mpi


def _env(**extra) -> dict:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def _hlo_run(*args, env=None, timeout=90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hloc.cli.run", *map(str, args)],
                          capture_output=True, text=True, env=env or _env(), timeout=timeout)


def _mpiexec(n: int, *argv, env=None, timeout=90) -> subprocess.CompletedProcess:
    return subprocess.run([find_mpiexec(), "-n", str(n), *map(str, argv)], capture_output=True,
                          text=True, env=env or _env(), timeout=timeout)


def _arrays(path) -> list[np.ndarray]:
    data = np.load(path)
    return [data[f"out{i}"] for i in range(len([k for k in data.files if k.startswith("out")]))]


def _inputs(name) -> list[np.ndarray]:
    data = np.load(SPMD / f"{name}.inputs.npz")
    return [data[f"arg{i}"] for i in range(len(data.files))]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    from hloc.cli.main import cli

    out = tmp_path_factory.mktemp("mpi_bundles")
    made = {}
    for name in [*FOUR, TWO]:
        made[name] = out / f"{name}.bundle"
        res = CliRunner().invoke(cli, ["compile", str(SPMD / f"{name}.opt.pb"), "-o",
                                       str(made[name]), "--target", "interpreter"])
        assert res.exit_code == 0, res.output
    return made


def _spmd_reference(bundle: Path) -> list[np.ndarray]:
    from hloc.bundle import read_bundle
    from hloc.runtime.executable import InterpreterExecutable

    exe = InterpreterExecutable(read_bundle(str(bundle)))
    return exe.run(_inputs(bundle.stem))


def test_four_rank_samples_match_xla_and_deterministic_is_bit_identical(bundles, tmp_path):
    res = _mpiexec(4, sys.executable, ROOT / "tests" / "mpi_worker.py", tmp_path, SPMD,
                   *[bundles[n] for n in FOUR], timeout=180)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "selfcheck.ok").exists()  # the communicator's own paths, 4 ranks
    assert (tmp_path / "nccl.ok").exists()  # the emulated NCCL against NCCL's definition
    for name in FOUR:
        tol = json.loads((SPMD / f"{name}.json").read_text())["tolerance"]
        want = _arrays(SPMD / f"{name}.expected.npz")
        ref = _spmd_reference(bundles[name])
        for mode in ("native", "deterministic"):
            got = _arrays(tmp_path / f"{name}.{mode}.npz")
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g, w, rtol=tol["rtol"], atol=tol["atol"])
        for g, r in zip(_arrays(tmp_path / f"{name}.deterministic.npz"), ref, strict=True):
            np.testing.assert_array_equal(g, r)  # bit for bit


def test_processes_2_cli_expected_reference_output_report(bundles, tmp_path):
    out, report = tmp_path / "out.npz", tmp_path / "report.json"
    res = _hlo_run(bundles[TWO], "--processes", 2, "--inputs", SPMD / f"{TWO}.inputs.npz",
                   "--expected", SPMD / f"{TWO}.expected.npz", "--reference",
                   "--deterministic-collectives", "--output", out, "--report", report)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("OK: 2 of 2 output(s) match") == 2  # expected and reference, once
    for g, r in zip(_arrays(out), _spmd_reference(bundles[TWO]), strict=True):
        np.testing.assert_array_equal(g, r)
    rep = json.loads(report.read_text())
    assert rep["processes"] == 2 and rep["expected"]["ok"] and rep["reference"]["ok"]


def test_mpiexec_hlo_run_benchmark_and_profile(bundles):
    name = "dp_train_step"
    res = _mpiexec(4, sys.executable, "-m", "hloc.cli.run", bundles[name], "--inputs",
                   SPMD / f"{name}.inputs.npz", "--expected", SPMD / f"{name}.expected.npz",
                   "--benchmark", 2, "--profile", timeout=180)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("benchmark: n=2") == 1
    assert "collectives per rank, per run: rank 0:" in res.stdout and "rank 3:" in res.stdout


def test_a_rank_that_dies_ends_the_job(bundles):
    res = _hlo_run(bundles[TWO], "--processes", 2, "--inputs", SPMD / f"{TWO}.inputs.npz",
                   env=_env(HLOC_TEST_MPI_FAULT="1:exit"), timeout=60)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    # Rank 1 exits with 7; MPICH's mpiexec then kills rank 0, and now and then on a loaded
    # machine (2 of some 50 runs beside other processes) reports rank 0's SIGKILL (9) as the
    # job's status instead.
    assert len(lines) == 1, lines
    assert re.search(r"a rank ended without a message \(exit status (7|9)\)", lines[0]), lines


def test_a_stuck_collective_times_out_with_one_line(bundles):
    res = _hlo_run(bundles[TWO], "--processes", 2, "--inputs", SPMD / f"{TWO}.inputs.npz",
                   "--collective-timeout", 2, env=_env(HLOC_TEST_MPI_FAULT="0:hang"), timeout=60)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "rank 1" in lines[0] and "did not complete within 2 s" in lines[0]


def test_mismatched_bundles_are_refused_before_any_collective(bundles, tmp_path):
    from hloc.cli.main import cli

    other = tmp_path / "other.bundle"  # the same module, compiled differently
    res = CliRunner().invoke(cli, ["compile", str(SPMD / f"{TWO}.opt.pb"), "-o", str(other),
                                   "--target", "interpreter", "-O0"])
    assert res.exit_code == 0, res.output
    py = [sys.executable, "-m", "hloc.cli.run"]
    res = _mpiexec(1, *py, bundles[TWO], "--zero-inputs", ":", "-n", 1, *py, other,
                   "--zero-inputs", timeout=60)
    assert res.returncode == 2
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("hlo-run:")]
    assert errors == ["hlo-run: error: ranks [1] have a different bundle or options than rank 0 "
                      "(every rank must run the same bundle with the same options)"]


def test_wrong_rank_count_is_one_line(bundles):
    res = _hlo_run(bundles["dp_train_step"], "--processes", 2, "--zero-inputs", timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"hlo-run: error: {bundles['dp_train_step']}: the bundle runs on 4 devices but the MPI "
        "job has 2 ranks (use --processes 4 or mpiexec -n 4)"]


def test_missing_mpi_says_what_to_install(monkeypatch):
    from hloc.cli import launch
    from hloc.collectives import mpi

    monkeypatch.setattr(launch, "find_mpiexec", lambda: None)
    with pytest.raises(mpi.MissingMpiError, match=r"mpiexec not found .*pip install 'hloc\[dist\]'"):
        launch.launch(2, ["b.bundle"])
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now fails
    with pytest.raises(mpi.MissingMpiError, match=r"need mpi4py .*pip install 'hloc\[dist\]'"):
        mpi.import_mpi()


def test_a_rank_line_mpiexec_did_not_forward_is_still_printed(tmp_path, monkeypatch, capsys):
    """A failing rank leaves its error line in the launcher's message directory too (mpiexec
    was seen to end a job under load before forwarding it): a fake mpiexec that prints
    nothing and exits 2, as mpiexec did then, after the rank's guarded error path ran."""
    from hloc.cli import common, launch

    script = tmp_path / "mpiexec"
    rank = ("import os, sys; sys.path.insert(0, sys.argv[1]); "
            "from hloc.cli.common import say_error; "
            "say_error('hlo-run: error: rank 1: collective all-reduce.1 did not complete')")
    script.write_text(f"#!/bin/sh\n{sys.executable} -c \"{rank}\" {Path(__file__).parents[1]} "
                      f"2>/dev/null\nexit 2\n")
    script.chmod(0o755)
    monkeypatch.setattr(launch, "find_mpiexec", lambda: str(script))
    assert launch.launch(2, ["b.bundle"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hlo-run: error: rank 1: collective all-reduce.1 did not complete"], err
    assert common.RANK_MESSAGES_ENV not in os.environ


def _compile(tmp_path, name: str, target: str) -> Path:
    from hloc.cli.main import cli

    bundle = tmp_path / f"{name}.{target}.bundle"
    res = CliRunner().invoke(cli, ["compile", str(SPMD / f"{name}.opt.pb"), "-o", str(bundle),
                                   "--target", target, "--no-cache"])
    assert res.exit_code == 0, res.output
    return bundle


def _run_ranks(bundle: Path, name: str, ranks: int, device: str, out: Path, *extra,
               env=None) -> dict:
    """Run as `ranks` MPI ranks; check the global outputs against XLA's; the --report (and
    the run's stdout as "stdout")."""
    report = out.with_suffix(".json")
    res = _hlo_run(bundle, "--processes", ranks, "--device", device, "--inputs",
                   SPMD / f"{name}.inputs.npz", "--output", out, "--report", report, *extra,
                   env=env, timeout=240)
    assert res.returncode == 0, res.stderr
    tol = json.loads((SPMD / f"{name}.json").read_text())["tolerance"]
    for g, w in zip(_arrays(out), _arrays(SPMD / f"{name}.expected.npz"), strict=True):
        np.testing.assert_allclose(g, w, rtol=tol["rtol"], atol=tol["atol"])
    return dict(json.loads(report.read_text()), stdout=res.stdout)


@pytest.mark.parametrize("name", ["dp_train_step", "mesh2d_transformer"])
def test_cpu_bundles_run_as_ranks(tmp_path, name):
    """cpu bundles: collective thunks over MPI, global outputs vs XLA."""
    report = _run_ranks(_compile(tmp_path, name, "cpu"), name, 4, "cpu", tmp_path / "out.npz")
    assert "collectives" not in report  # no device collectives on the CPU


def test_cuda_emulated_ranks_run_collectives_as_emulated_nccl(tmp_path):
    """cuda-emulated, 4 ranks: every collective of shard_map_collectives that NCCL can do
    runs through the NCCL mapping (all-to-all, all-gather, permutes, sum, reduce-scatter) on
    the emulated NCCL, the float min/max host-staged, interleaved, and XLA's outputs come out."""
    name = "shard_map_collectives"
    report = _run_ranks(_compile(tmp_path, name, "cuda"), name, 4, "cuda-emulated",
                        tmp_path / "out.npz")
    got = report["collectives"]
    assert got["engine"] == "emulated nccl"
    assert got["nccl"] == ["all-to-all", "all_gather.3", "ppermute.6", "ppermute.7",
                           "psum_invariant.7", "reduce_scatter.7"]
    assert sorted(got["host_staged"]) == ["pmax.7", "pmin.7"]
    assert all("NaN" in why for why in got["host_staged"].values())


def test_cuda_emulated_nccl_and_host_staged_agree_bit_for_bit(tmp_path):
    """2 ranks (a sum of two is the same in either order): the NCCL path and the host-staged
    one (HLOC_NCCL=off) give identical outputs; --profile names the path taken."""
    bundle = _compile(tmp_path, TWO, "cuda")
    nccl = _run_ranks(bundle, TWO, 2, "cuda-emulated", tmp_path / "nccl.npz", "--profile")
    assert nccl["collectives"]["nccl"] == ["all_gather.3", "ppermute.3", "psum_invariant.7"]
    assert ("device collectives: emulated nccl, 3 of 3 collective thunk(s) as NCCL calls\n"
            in nccl["stdout"])
    staged = _run_ranks(bundle, TWO, 2, "cuda-emulated", tmp_path / "staged.npz",
                        env=_env(HLOC_NCCL="off"))
    assert staged["collectives"]["engine"] == "host-staged"
    assert staged["collectives"]["nccl"] == [] and staged["collectives"]["reason"] == \
        "HLOC_NCCL=off"
    for a, b in zip(_arrays(tmp_path / "nccl.npz"), _arrays(tmp_path / "staged.npz"),
                    strict=True):
        np.testing.assert_array_equal(a, b)
