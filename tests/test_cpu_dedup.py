"""Identical kernels are emitted once (hloc/codegen/cpu/dedup.py) and still compute right."""

from __future__ import annotations

import numpy as np

from hloc.codegen.cpu.dedup import computation_key
from hloc.ir.text.parser import parse_module

from .support.bundles import compile_bundle, kernels_json, load_cpu
from .support.run import interpret

# Two chains that differ only in names (the same kernel twice), and a third whose constant
# differs (a different kernel).
TEXT = """
HloModule dedup

ENTRY main {
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  c2 = f32[] constant(2)
  c3 = f32[] constant(3)
  b2 = f32[64] broadcast(c2), dimensions={}
  b2b = f32[64] broadcast(c2), dimensions={}
  b3 = f32[64] broadcast(c3), dimensions={}
  a = f32[64] multiply(x, b2)
  ea = f32[64] exponential(a)
  b = f32[64] multiply(y, b2b)
  eb = f32[64] exponential(b)
  c = f32[64] multiply(x, b3)
  ec = f32[64] exponential(c)
  ROOT t = (f32[64], f32[64], f32[64]) tuple(ea, eb, ec)
}
"""


def test_identical_kernels_share_a_symbol(tmp_path):
    path = compile_bundle(TEXT, tmp_path / "d.bundle", passes="cse,fusion,dce")
    kernels = kernels_json(path)["kernels"]
    symbols = [k["symbol"] for k in kernels.values()]
    assert len(kernels) == 3
    assert len(set(symbols)) == 2, symbols
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    y = np.linspace(5, -1, 64, dtype=np.float32)
    got = load_cpu(path).run([x, y])
    want = interpret(TEXT, [x, y])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert not np.allclose(got[0], got[2])  # the different constant really is different


def test_key_ignores_names_but_not_structure():
    module = parse_module(TEXT)
    entry = module.entry
    # The entry itself differs from a renamed copy only by names: same key.
    renamed = parse_module(TEXT.replace("ea", "q1").replace("eb", "q2"))
    assert computation_key(entry) == computation_key(renamed.entry)
    other = parse_module(TEXT.replace("constant(3)", "constant(4)"))
    assert computation_key(entry) != computation_key(other.entry)
