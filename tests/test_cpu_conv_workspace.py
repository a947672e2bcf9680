"""The convolution workspace (runtime/cpu/conv_native.py, LoadContext.conv_workspace): the
native implicit-GEMM convolutions of an executable share one buffer for their padded input
and packed filter, so each must clear its padding every run, and the runtime's own memory
must not grow with the number of convolutions."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from click.testing import CliRunner

from hloc.cli.run import cli as run_cli
from hloc.runtime.cpu import conv_native

from .support.bundles import compile_bundle, load_cpu
from .support.run import interpret
from .support.values import assert_matches

pytestmark = [pytest.mark.cpu, pytest.mark.skipif(
    conv_native.library() is None, reason="the kernel runs on hosts with AVX2 and FMA")]


def _padded(n: int, lo: int, hi: int, base: int = 1) -> int:
    return (n - 1) * base + 1 + lo + hi


def _chain(n: int, hw: int, c: int, layers: list[tuple[int, int, int, int, int]],
           shared_weights: bool = False) -> tuple[str, list[tuple[int, ...]]]:
    """HLO text of convolutions applied one after another to x f32[n, hw, hw, c]; each layer
    (pad_lo, pad_hi, stride, lhs dilation, output features) is a 3x3 window with the same
    padding on both spatial axes but for H's low side, which gets one less (asymmetric)."""
    lines = [f"  x = f32[{n},{hw},{hw},{c}] parameter(0)"]
    params, value, size, feats = [(n, hw, hw, c)], "x", (hw, hw), c
    for i, (lo, hi, stride, base, o) in enumerate(layers):
        w = "w0" if shared_weights else f"w{i}"
        if not shared_weights or i == 0:
            lines.append(f"  {w} = f32[3,3,{feats},{o}] parameter({len(params)})")
            params.append((3, 3, feats, o))
        pads = ((lo - 1, hi), (lo, hi))
        size = tuple((_padded(s, a, b, base) - 3) // stride + 1
                     for s, (a, b) in zip(size, pads, strict=True))
        window = (f"size=3x3 stride={stride}x{stride} pad={pads[0][0]}_{pads[0][1]}x"
                  f"{pads[1][0]}_{pads[1][1]} lhs_dilate={base}x{base}")
        root = "ROOT " if i == len(layers) - 1 else ""
        lines.append(f"  {root}c{i} = f32[{n},{size[0]},{size[1]},{o}] convolution({value}, "
                     f"{w}), window={{{window}}}, dim_labels=b01f_01io->b01f")
        value, feats = f"c{i}", o
    return "HloModule chain\nENTRY e {\n" + "\n".join(lines) + "\n}\n", params


# Padding of either sign, asymmetric, strided and lhs-dilated (zero holes between inputs),
# so the layers sharing the workspace leave each other's data where the next one's padding is.
LAYERS = [(0, 0, 1, 1, 40), (2, 3, 1, 1, 36), (-1, 2, 2, 1, 32), (1, 1, 1, 2, 24),
          (3, 0, 1, 1, 40)]


@pytest.mark.parametrize("images", [1, 3])
def test_layers_sharing_the_workspace_clear_their_padding(images, tmp_path, monkeypatch):
    """The workspace is filled with NaN before each run: a layer reading anything the
    previous one left there would put NaN in the result."""
    built: list = []
    original = conv_native.conv_runner

    def counted(*args, **kwargs):
        runner = original(*args, **kwargs)
        built.append(runner is not None)
        return runner
    monkeypatch.setattr(conv_native, "conv_runner", counted)
    text, shapes = _chain(images, 40, 32, LAYERS)
    rng = np.random.default_rng(images)
    # Weights scaled to keep every layer's values near 1 (rounding errors stay small).
    args = [(rng.standard_normal(s) / np.sqrt(np.prod(s[:-1]))).astype(np.float32)
            for s in shapes]
    want = interpret(text, args)
    # conv-phases would split the lhs-dilated layer into small convolutions of other kernels.
    exe = load_cpu(compile_bundle(text, tmp_path / "chain.bundle",
                                  disabled_passes=("conv-phases",)))
    assert built == [True] * len(LAYERS)  # every layer on the kernel, so all share it
    workspace = exe._ctx.conv_workspace()
    for _ in range(2):
        workspace.view(np.uint8)[:] = 0xFF  # f32 NaN in every word
        got = exe.run(args)
        assert_matches(np.asarray(got[0]), want[0], rtol=1e-4, atol=1e-4, what="chain")


def _private_bytes(path) -> tuple[int, int]:
    """(bytes the loaded executable holds besides its arena after one run, tracemalloc seeing
    NumPy's allocations: what its runners allocated for themselves; its runtime_bytes)."""
    tracemalloc.start()
    try:
        exe = load_cpu(path)
        exe.run([np.zeros(p["shape"], np.float32)
                 for p in exe.bundle.manifest["entry"]["parameters"]])
        traced = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return traced - exe.memory.arena.nbytes, exe.runtime_bytes()


def test_runtime_memory_does_not_grow_with_the_convolutions(tmp_path):
    """Six convolutions hold one workspace, not six padded inputs and six packed filters;
    hlo-run's runtime_bytes (CpuExecutable.runtime_bytes) counts it once."""
    one, six = ([(1, 1, 1, 1, 16)] * k for k in (1, 6))
    paths = []
    for name, layers in (("one", one), ("six", six)):
        text, _ = _chain(4, 64, 16, layers, shared_weights=True)
        paths.append(compile_bundle(text, tmp_path / f"{name}.bundle"))
    (private_one, runtime_one), (private_six, runtime_six) = map(_private_bytes, paths)
    padded_input = 4 * 65 * 66 * 16 * 4  # 1.1 MB, each layer's
    assert private_six - private_one < padded_input // 2, \
        f"{private_six - private_one} more bytes for five more convolutions"
    assert runtime_six == runtime_one >= padded_input
    report = tmp_path / "report.json"
    r = CliRunner().invoke(run_cli, [str(paths[1]), "--random-inputs", "--report", str(report)])
    assert r.exit_code == 0, r.output
    assert json.loads(report.read_text())["memory"]["runtime_bytes"] == runtime_six
