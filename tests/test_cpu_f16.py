"""f16 arithmetic on the CPU: every op computes in f32 and rounds its result to f16. Targets
with F16C round with the hardware conversion (vcvtps2ph, which ignores the kernels' FTZ:
tiny results stay subnormal), others with integer code; both give the interpreter's bits,
NaN payloads included (a signalling NaN keeps its payload, which the hardware would quiet)."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.codegen.target import cpu_target

from .support.bundles import members
from .support.run import run_cases
from .support.values import edge_values

pytestmark = pytest.mark.cpu

CHAIN = """HloModule h
ENTRY e {
  a = f16[N] parameter(0)
  b = f16[N] parameter(1)
  m = f16[N] multiply(a, b)
  s = f16[N] subtract(m, a)
  t = f16[N] tanh(s)
  c = s16[N] bitcast-convert(a)
  n = f16[N] negate(a)
  ROOT r = (f16[N], f16[N], s16[N], f16[N]) tuple(t, m, c, n)
}
"""


def _values(rng) -> tuple[np.ndarray, np.ndarray]:
    edges = edge_values("f16")
    # Signalling and quiet NaNs with payloads, and products whose f16 result is subnormal.
    nans = np.array([0x7C01, 0xFC01, 0x7D55, 0x7E00, 0xFE3F], np.uint16).view(np.float16)
    tiny = np.float16(2.0 ** -12) * rng.uniform(0.5, 1.5, 40).astype(np.float16)
    a = np.concatenate([edges, nans, tiny, rng.standard_normal(200).astype(np.float16)])
    b = np.concatenate([edges[::-1], nans, tiny, rng.standard_normal(200).astype(np.float16)])
    return a, b


@pytest.mark.parametrize("cpu", [None, "x86-64-v3", "x86-64"], ids=["host", "v3", "baseline"])
def test_f16_rounding_matches_the_interpreter_bit_for_bit(cpu, tmp_path):
    a, b = _values(np.random.default_rng(21))
    text = CHAIN.replace("[N]", f"[{a.size}]")
    o = run_cases({"case": (text, [a, b])}, tmp=tmp_path, cpu=cpu, passes="layout-assignment")["case"]
    tanh, product, bits, negated = o.got
    want = o.want
    for got, expected in ((tanh, want[0]), (product, want[1])):  # NaN results: any NaN
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        finite = ~np.isnan(expected)
        np.testing.assert_array_equal(got[finite].view(np.uint16),
                                      expected[finite].view(np.uint16))
    np.testing.assert_array_equal(bits, want[2])
    np.testing.assert_array_equal(negated.view(np.uint16), want[3].view(np.uint16))
    ir_text = members(o.artifact)["module.ll"].decode()
    assert ("to half" in ir_text) == cpu_target(cpu).has("f16c")
