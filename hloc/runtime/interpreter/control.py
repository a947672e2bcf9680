"""Control flow and calls: while, conditional, fusion, custom-call (a small allowlist)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import UnsupportedError
from ...ir import Opcode
from ...registry import Registry
from .registry import impl
from .sort import sort_perm, top_k_perm


@impl(Opcode.WHILE)
def while_(ctx, instr, ops):
    body, cond = instr.called  # XLA keeps the body first (kBodyComputationIndex = 0)
    state = ops[0]
    while bool(np.asarray(ctx.call(cond, [state]))):
        state = ctx.call(body, [state])
    return state


@impl(Opcode.CONDITIONAL)
def conditional(ctx, instr, ops):
    selector = np.asarray(ops[0])
    branches = instr.called
    if selector.dtype == np.bool_:
        index = 0 if bool(selector) else 1
    else:
        index = int(selector.astype(np.int64))
        # An out-of-range branch index selects the last branch.
        if index < 0 or index >= len(branches):
            index = len(branches) - 1
    return ctx.call(branches[index], [ops[1 + index]])


@impl(Opcode.FUSION)
def fusion(ctx, instr, ops):
    return ctx.call(instr.called[0], ops)


# ---- custom calls ----------------------------------------------------------------------------

CustomCallImpl = Callable  # (ctx, instr, operand values) -> value
# Exact target name -> implementation; filled here and by contract.py (LAPACK targets).
CUSTOM_CALLS: Registry[str, CustomCallImpl] = Registry(
    "interpreter custom-call target", modules=("hloc.runtime.interpreter.contract",))
# Decorator: `@custom_call_target("TopK", ...)` implements those custom-call targets.
custom_call_target = CUSTOM_CALLS.register


@impl(Opcode.CUSTOM_CALL)
def custom_call(ctx, instr, ops):
    target = instr.attrs.custom_call_target or ""
    fn = CUSTOM_CALLS.get(target)
    if fn is None:
        raise UnsupportedError(f"unsupported custom-call target {target}")
    return fn(ctx, instr, ops)


@custom_call_target("TopK")
def cpu_top_k(ctx, instr, ops):
    """XLA CPU's TopK: operand [batch, n] or [n]; the comparator says which element goes first."""
    (x,) = ops
    values_shape, index_shape = instr.shape.tuple_shapes
    k = values_shape.dims[-1]
    rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    if instr.called:
        iota = np.broadcast_to(np.arange(rows.shape[1], dtype=np.int32), rows.shape)
        perm = sort_perm(ctx, instr.called[0], [rows, iota]) if rows.size else \
            np.zeros(rows.shape, np.int64)
    else:
        perm = top_k_perm(rows, rows.shape[1], largest=True)
    perm = perm[:, :k]
    values = np.take_along_axis(rows, perm, axis=1).reshape(values_shape.dims)
    return values, perm.astype(index_shape.np_dtype).reshape(index_shape.dims)

