"""Loops split into residue classes (codegen/elemental/regions.py, codegen/cpu/loops.py,
the pad lowering in codegen/elemental/indexing.py): where interior padding interleaves two
arrays level after level, as `lax.associative_scan`'s down-sweep does, each residue class
of the index reads one side of every pad, instead of a per-element select that computed
both sides, 2^levels chains per element."""

from __future__ import annotations

import re

import numpy as np
import pytest

from hloc.codegen.elemental.regions import analyze
from hloc.ir.text.parser import parse_module

from .support.bundles import members
from .support.hlo import reducer_text
from .support.run import compare_with_interpreter, run_cases

pytestmark = pytest.mark.cpu


def _downsweep(levels: int, base: int, rows: int | None = None, *, cut: int = 0,
               reverse: bool = False, window: int = 0) -> tuple[str, list[tuple]]:
    """HLO of a scan's down-sweep: `levels` times, v' = pad(concat(v[0:1], v[1:] + q[:-1]),
    interior 1, high 1) + pad(q, low 1, interior 1), doubling v from `base` elements. With
    `rows`, the arrays are [n, rows] and interleave along dimension 0 (outer); `cut` drops
    that many elements at the end, `reverse` reverses the result, `window` sums it in windows
    of that many elements along the interleaved dimension."""
    def shape(n):
        return f"f32[{n}]{{0}}" if rows is None else f"f32[{n},{rows}]{{1,0}}"

    def sl(lo, hi):
        return f"[{lo}:{hi}]" if rows is None else f"[{lo}:{hi}], [0:{rows}]"

    def pad(lo, hi, interior):
        p = f"{lo}_{hi}_{interior}"
        return p if rows is None else f"{p}x0_0_0"

    lines = ["  z = f32[] constant(0)", f"  v0 = {shape(base)} parameter(0)"]
    shapes, n = [(base,)], base
    for k in range(levels):
        q = f"q{k}"
        lines += [
            f"  {q} = {shape(n)} parameter({k + 1})",
            f"  h{k} = {shape(1)} slice(v{k}), slice={{{sl(0, 1)}}}",
            f"  t{k} = {shape(n - 1)} slice(v{k}), slice={{{sl(1, n)}}}",
            f"  u{k} = {shape(n - 1)} slice({q}), slice={{{sl(0, n - 1)}}}",
            f"  s{k} = {shape(n - 1)} add(t{k}, u{k})",
            f"  c{k} = {shape(n)} concatenate(h{k}, s{k}), dimensions={{0}}",
            f"  a{k} = {shape(2 * n)} pad(c{k}, z), padding={pad(0, 1, 1)}",
            f"  b{k} = {shape(2 * n)} pad({q}, z), padding={pad(1, 0, 1)}",
            f"  v{k + 1} = {shape(2 * n)} add(a{k}, b{k})",
        ]
        shapes.append((n,))
        n *= 2
    last = f"v{levels}"
    if cut:
        lines.append(f"  cut = {shape(n - cut)} slice({last}), slice={{{sl(0, n - cut)}}}")
        last, n = "cut", n - cut
    if reverse:
        lines.append(f"  rev = {shape(n)} reverse({last}), dimensions={{0}}")
        last = "rev"
    if window:
        out = n // window
        size = f"{window}" if rows is None else f"{window}x1"
        lines += [
            "  zz = f32[] constant(0)",
            f"  win = {shape(out)} reduce-window({last}, zz), window={{size={size} "
            f"stride={size}}}, to_apply=sum",
        ]
        last = "win"
    lines[-1] = lines[-1].replace(f"  {last} =", f"  ROOT {last} =")
    params = [s if rows is None else (*s, rows) for s in shapes]
    text = "HloModule downsweep\n" + reducer_text("add", name="sum") + "\nENTRY e {\n" + \
        "\n".join(lines) + "\n}\n"
    return text, params


def _args(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_periods_are_the_interleaving_depth():
    text, _ = _downsweep(3, 700)
    root = parse_module(text).entry.root
    assert analyze([root], 1).periods == [8]
    text, _ = _downsweep(2, 300, rows=16)
    root = parse_module(text).entry.root
    assert analyze([root], 2).periods == [4, 1]
    # Five levels would need 32 classes: the period stops at MAX_PERIOD (16), the deepest
    # level choosing per element.
    text, _ = _downsweep(5, 200)
    assert analyze([parse_module(text).entry.root], 1).periods == [16]


CASES = {
    "one_level": _downsweep(1, 5000),
    "three_levels": _downsweep(3, 700),
    "cut_reversed": _downsweep(3, 700, cut=5, reverse=True),
    "five_levels": _downsweep(5, 200, cut=3),
    "rows": _downsweep(3, 100, rows=48),
    "rows_cut_reversed": _downsweep(2, 301, rows=40, cut=1, reverse=True),
    "windows": _downsweep(3, 700, window=16),
    "row_windows": _downsweep(4, 64, rows=32, window=32),
    # windows of more than 32 taps: swept a row at a time (codegen/cpu/reduce_window.py)
    "long_row_windows": _downsweep(4, 64, rows=32, window=64),
}


@pytest.mark.parametrize("backend", ["cpu-kernels", "cpu"])
def test_downsweeps_match_the_interpreter(backend, tmp_path):
    cases = {name: (text, _args(shapes, n)) for n, (name, (text, shapes)) in
             enumerate(CASES.items())}
    compare_with_interpreter(cases, backend, rtol=1e-6, atol=1e-6, tmp=tmp_path)


def _blocks(ir_text: str, label: str) -> list[str]:
    """The bodies of the basic blocks whose label starts with `label`."""
    return re.findall(rf"^{re.escape(label)}[\w.]*:\n(.*?)(?=^[\w.\"]+:|^}})", ir_text,
                      re.S | re.M)


@pytest.mark.parametrize("cpu", ["", "x86-64-v3"])
def test_residue_copies_read_one_side_of_every_pad(cpu, tmp_path):
    """In the loop over whole periods, no copy tests a parity (srem) or selects between
    the sides of a pad: each reads its side through a shift."""
    text, shapes = _downsweep(3, 700)
    options = {"cpu": cpu} if cpu else {}
    o = run_cases({"scan": (text, _args(shapes, 1))}, tmp=tmp_path, **options)["scan"]
    np.testing.assert_allclose(o.got[0], o.want[0], rtol=1e-6, atol=1e-6)
    ir_text = members(o.artifact)["module.ll"].decode()
    bodies = _blocks(ir_text, "jp.body")
    assert bodies, "no loop over residue classes"
    for body in bodies:
        assert "srem" not in body and "select" not in body, body[:2000]
        assert "ashr" in body
