"""Temp memory against XLA: on XLA's own optimized module (NAME.opt.pb, the fair comparison),
our temp allocation must not exceed XLA CPU's `temp_size_in_bytes` (NAME.json
"xla_temp_bytes"), and the geometric mean of the ratios must stay at or below 1."""

from __future__ import annotations

import math

import pytest

from hloc.plan import plan
from tests.conftest import SAMPLES, sample_meta, sample_names

from .support.buffers import prepare

pytestmark = pytest.mark.pure

NAMES = [n for n in sample_names() if (SAMPLES / f"{n}.opt.pb").exists()
         and sample_meta(n).get("xla_temp_bytes")]


def _temp(name: str) -> int:
    return plan(prepare(SAMPLES / f"{name}.opt.pb")).memory.temp_bytes


@pytest.mark.parametrize("name", NAMES)
def test_temp_bytes_within_xla(name):
    xla = sample_meta(name)["xla_temp_bytes"]
    assert _temp(name) <= xla


def test_geomean_ratio_at_most_one():
    if not NAMES:
        pytest.skip("no samples generated")
    ratios = [(_temp(n) + 1) / (sample_meta(n)["xla_temp_bytes"] + 1) for n in NAMES]
    assert math.exp(sum(map(math.log, ratios)) / len(ratios)) <= 1.0
