"""`hloc compile --check-determinism N`: identical today; a hash-seed-dependent pass is caught."""

from __future__ import annotations

import os

from click.testing import CliRunner

from hloc.cli.main import cli as hloc_cli
from hloc.debug.determinism import compile_argv

from .conftest import SAMPLES, require_samples

# Loaded by every compile process through PYTHONPATH (Python imports `sitecustomize` at start):
# a pass whose output depends on the string hash seed, registered only in the test's runs.
PLUGIN = '''
from dataclasses import dataclass
from hloc.passes.base import Pass, register_pass

@register_pass
@dataclass
class HashOrder(Pass):
    """Test only: names the entry root after hash(), which PYTHONHASHSEED changes."""

    name = "test-hash-order"

    def run(self, module):
        module.entry.root.name = f"root_{hash('hloc') % 1000003}"
        return True
'''


def hloc(*args):
    return CliRunner().invoke(hloc_cli, [str(a) for a in args], catch_exceptions=False)


def test_compile_is_deterministic(tmp_path):
    require_samples()
    out = tmp_path / "m.bundle"
    r = hloc("compile", SAMPLES / "mlp.hlo", "-o", out, "--target", "interpreter",
             "--check-determinism", 2, "--dump-dir", tmp_path / "d")
    assert r.exit_code == 0, r.output
    assert "deterministic: 2 compiles" in r.output and out.exists()
    assert (tmp_path / "d" / "run1" / "index.json").exists()


def test_hash_dependent_pass_is_named(tmp_path, monkeypatch):
    require_samples()
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sitecustomize.py").write_text(PLUGIN)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(plugin), os.environ.get("PYTHONPATH", "")]))
    r = hloc("compile", SAMPLES / "mlp.hlo", "-o", tmp_path / "m.bundle", "--target", "interpreter",
             "--passes", "call-inliner,dce,test-hash-order,dce", "--check-determinism", 2)
    assert r.exit_code == 1, r.output
    assert "stage 'passes' differs first" in r.output
    assert "0003.jit_f.after_test_hash_order.hlo" in r.output
    assert not (tmp_path / "m.bundle").exists()


def test_failing_compile_keeps_its_exit_code(tmp_path):
    r = hloc("compile", tmp_path / "missing.hlo", "-o", tmp_path / "m.bundle", "--check-determinism", 2)
    assert r.exit_code == 2 and "failed" in r.output and "Traceback" not in r.output


def test_compile_argv_rebuilds_flags():
    from hloc.cli.main import compile as compile_cmd

    ctx = compile_cmd.make_context("compile", ["m.hlo", "-o", "o.bundle", "-O3", "--disable-pass", "cse",
                                               "--disable-pass", "dce", "--target", "cuda",
                                               "--check-determinism", "3", "--dump-dir", "d"])
    assert compile_argv(compile_cmd, ctx.params) == ["m.hlo", "--target", "cuda", "-O3",
                                                  "--disable-pass", "cse", "--disable-pass", "dce"]
