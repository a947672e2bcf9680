"""--localize, --perturb and --trace on a multi-device bundle: every device in this process
(threads) and as MPI ranks (`--processes 2`). samples/spmd/shard_map_2dev compiled -O0 for
cpu: all-gather, collective-permute, partition-id, two fusions, all-reduce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hloc.cli.main import cli as hloc_cli
from hloc.cli.run import cli as run_cli

SPMD = Path(__file__).resolve().parent.parent / "samples" / "spmd"
INPUTS = SPMD / "shard_map_2dev.inputs.npz"


def _invoke(cli, *args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mdebug") / "two.bundle"
    r = _invoke(hloc_cli, "compile", SPMD / "shard_map_2dev.opt.pb", "-O0", "-o", out,
                "--no-cache")
    assert r.exit_code == 0, r.output
    return out


def _slices(trace: Path) -> list[dict]:
    return [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]


def check_trace(trace: Path) -> None:
    """Both devices' thunks (pid = rank), the collectives among them with bytes moved."""
    slices = _slices(trace)
    assert {e["pid"] for e in slices} == {0, 1}
    for pid in (0, 1):
        mine = {e["name"]: e for e in slices if e["pid"] == pid}
        assert {"slice_add_fusion", "multiply_reduce_fusion", "axis_index.12"} <= set(mine)
        ops = {e["args"].get("collective") for e in mine.values() if e["cat"] == "collective"}
        assert ops == {"all-gather", "collective-permute", "all-reduce"}
        assert all(e["args"]["bytes"] > 0 for e in mine.values() if e["cat"] == "collective")


def test_unperturbed_run_has_no_divergence(bundle, tmp_path):
    r = _invoke(run_cli, bundle, "--inputs", INPUTS, "--localize", "--report", tmp_path / "r.json")
    assert r.exit_code == 0, r.output
    assert "on 2 device(s)" in r.output and "no thunk diverges" in r.output
    loc = json.loads((tmp_path / "r.json").read_text())["localize"]
    assert loc["first_divergent"] is None and loc["devices"] == 2
    assert loc["checked"] == 6 and loc["collectives_unchecked"] == 6


@pytest.mark.parametrize("thunk,rank", [("multiply_reduce_fusion", None),
                                        ("slice_add_fusion", 1), ("axis_index.12", 1)])
def test_perturbed_thunk_is_found_on_its_device(bundle, tmp_path, thunk, rank):
    spec = thunk if rank is None else f"{thunk}@{rank}"
    r = _invoke(run_cli, bundle, "--inputs", INPUTS, "--localize", "--perturb", spec,
                "--report", tmp_path / "r.json", "--trace", tmp_path / "t.json")
    assert r.exit_code == 1, r.output
    want = rank or 0
    assert (f"first divergent thunk: {thunk} on rank {want} (replica 0, partition {want})"
            in r.output)
    first = json.loads((tmp_path / "r.json").read_text())["localize"]["first_divergent"]
    assert (first["thunk"], first["rank"], first["device"]) == (thunk, want, [0, want])
    check_trace(tmp_path / "t.json")


def test_perturb_rank_out_of_range_is_exit_2(bundle):
    r = _invoke(run_cli, bundle, "--inputs", INPUTS, "--localize", "--perturb",
                "slice_add_fusion@2")
    assert r.exit_code == 2 and "ranks 0 to 1" in r.output


@pytest.mark.mpi
def test_processes_2_localize_perturb_trace(bundle, tmp_path):
    from .test_mpi import _hlo_run, _mpi_available

    if not _mpi_available():
        pytest.skip("mpi4py / mpiexec not installed")
    trace, report = tmp_path / "t.json", tmp_path / "r.json"
    res = _hlo_run(bundle, "--processes", 2, "--inputs", INPUTS, "--localize", "--perturb",
                   "multiply_reduce_fusion@1", "--trace", trace, "--report", report)
    assert res.returncode == 1, res.stderr
    assert res.stdout.count("localize: checked") == 1  # rank 0 alone prints
    assert "multiply_reduce_fusion on rank 1 (replica 0, partition 1)" in res.stdout
    assert "diverges from the reference on rank 1" in res.stderr
    loc = json.loads(report.read_text())
    assert loc["processes"] == 2 and loc["localize"]["first_divergent"]["rank"] == 1
    check_trace(trace)
