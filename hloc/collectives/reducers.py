"""All-reduce reducers: the `to_apply` computation recognized as a standard kind when it is one.

A recognized kind (add, multiply, minimum, maximum, and, or) lets a transport use its native
reduction (MPI_SUM, ...); any other computation is applied elementwise through the reference
interpreter, so every reducer works, only slower.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hloc.ir import Computation
from hloc.ir.computation import scalar_binary_root
from hloc.ir.opcodes import Opcode as O

from ..util.record import dataclass


def _and(a, b):
    return np.logical_and(a, b) if a.dtype == np.bool_ else np.bitwise_and(a, b)


def _or(a, b):
    return np.logical_or(a, b) if a.dtype == np.bool_ else np.bitwise_or(a, b)


def _add(a, b):
    return np.logical_or(a, b) if a.dtype == np.bool_ else a + b  # pred add is or in XLA


# Kind -> NumPy combine of two arrays of one dtype (results keep the dtype).
KINDS: dict[str, Callable] = {
    "add": _add, "multiply": lambda a, b: a * b, "minimum": np.minimum, "maximum": np.maximum,
    "and": _and, "or": _or,
}
_KIND_OF = {O.ADD: "add", O.MULTIPLY: "multiply", O.MINIMUM: "minimum", O.MAXIMUM: "maximum",
            O.AND: "and", O.OR: "or"}


@dataclass(frozen=True)
class Reducer:
    """How to combine two participants' values: a standard kind or a computation."""

    kind: str | None  # one of KINDS, or None: evaluate `computation` elementwise
    computation: Computation | None = None

    def combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self.kind is not None:
            return np.asarray(KINDS[self.kind](a, b)).astype(a.dtype, copy=False)
        return _apply_elementwise(self.computation, a, b)

    def fold(self, values: Sequence[np.ndarray]) -> np.ndarray:
        """Reduce in participant order, ((v0 op v1) op v2) ..., as XLA CPU does."""
        acc = np.array(values[0], copy=True)
        for v in values[1:]:
            acc = self.combine(acc, np.asarray(v))
        return acc


def reducer_of(comp: Computation) -> Reducer:
    """The Reducer of an all-reduce / reduce-scatter `to_apply` computation."""
    root = scalar_binary_root(comp)
    if root is not None and root.opcode in _KIND_OF:
        return Reducer(_KIND_OF[root.opcode], comp)
    return Reducer(None, comp)


def _apply_elementwise(comp: Computation, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # The computation is scalar: run it once per element (only for non-standard reducers).
    from hloc.runtime.interpreter import evaluate_computation

    out = np.empty_like(a)
    flat_a, flat_b, flat_out = a.reshape(-1), b.reshape(-1), out.reshape(-1)
    for i in range(flat_a.size):
        flat_out[i] = evaluate_computation(comp, [flat_a[i:i + 1].reshape(()),
                                                  flat_b[i:i + 1].reshape(())])
    return out
