"""XLA's float TOTALORDER on narrow floats: the sort fast path, the comparator path and compare.

XLA CPU widens floats of 8 bits or fewer to f32 before keying them, so the fnuz types' single NaN
(bit pattern 0x80, the would-be -0) sorts as -NaN, below -max, not just below +0.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hloc.ir import Opcode
from hloc.runtime.interpreter import evaluate_computation
from hloc.runtime.interpreter.registry import Context
from hloc.runtime.interpreter.sort import comparator_keys, lexsort_perm, merge_sort_perm, top_k_perm
from tests.test_interp_structural import arr, run
from tests.test_interp_structural_compute import lex_comparator, total_key

pytestmark = pytest.mark.pure

NARROW = [ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3fn,
          ml_dtypes.float8_e5m2, ml_dtypes.float4_e2m1fn, ml_dtypes.bfloat16, np.float16]


def special_values(dtype) -> np.ndarray:
    """Every bit pattern of an 8-bit type; NaN, ±0, ±inf, ±1, ±max of wider ones."""
    if np.dtype(dtype).itemsize == 1:
        return np.arange(256, dtype=np.uint8).view(dtype)
    info = ml_dtypes.finfo(dtype)
    wide = [np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, float(info.max), -float(info.max)]
    return np.array(wide, np.float32).astype(dtype)


def xla_order(x: np.ndarray) -> list[int]:
    """The stable ascending TOTALORDER permutation of a row, keyed as XLA CPU keys it."""
    return sorted(range(len(x)), key=lambda j: total_key(np.float32(x[j])))


@pytest.mark.parametrize("dtype", NARROW, ids=lambda d: np.dtype(d).name)
def test_sort_fast_path_matches_comparator_path(dtype):
    rng = np.random.default_rng(7)
    x = rng.permutation(np.tile(special_values(dtype), 2)).reshape(1, -1)
    comp = lex_comparator([dtype], ("LT",), ["TOTALORDER"])
    ctx = Context(evaluate_computation)
    fast = lexsort_perm(ctx, [x], comparator_keys(comp))
    assert fast is not None, "the lexicographic comparator should take the lexsort fast path"
    slow = merge_sort_perm(ctx, comp, [x])
    assert fast[0].tolist() == slow[0].tolist() == xla_order(x[0])
    out = run(Opcode.SORT, arr(x.shape, dtype), [x], called=[comp], dimensions=(1,), is_stable=True)
    assert out.tobytes() == x[0, xla_order(x[0])].tobytes()


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz],
                         ids=lambda d: np.dtype(d).name)
def test_fnuz_nan_is_the_smallest_under_totalorder(dtype):
    nan, neg_max, zero = np.array([0x80, 0xFF, 0x00], np.uint8).view(dtype)
    a = np.array([nan, nan, neg_max], dtype)
    b = np.array([neg_max, zero, nan], dtype)
    lt = run(Opcode.COMPARE, arr((3,), np.bool_), [a, b], comparison_direction="LT",
             comparison_type="TOTALORDER")
    assert lt.tolist() == [True, True, False]
    x = np.array([[zero, nan, neg_max]], dtype)
    assert top_k_perm(x, 3, largest=False)[0].tolist() == [1, 2, 0]
    assert top_k_perm(x, 3, largest=True)[0].tolist() == [0, 2, 1]
