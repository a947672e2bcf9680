"""Generate hloc's sample corpus: real JAX-lowered HLO modules with XLA's own outputs.

This corpus is the oracle for hloc's tests.  For every sample NAME (top-level models in
``samples/`` and per-op edge cases in ``samples/ops/``) it writes:

  NAME.pb            unoptimized HloModuleProto bytes, exactly what
                     ``jax.jit(f).lower(*args).compiler_ir("hlo").as_serialized_hlo_module_proto()``
                     returns (the input hloc compiles)
  NAME.hlo           the same module as HLO text (``as_hlo_text()``)
  NAME.opt.pb        XLA:CPU's optimized, scheduled module (``compiled.runtime_executable()
  NAME.opt.hlo       .hlo_modules()[0]``) as proto bytes and as text (``to_string()``)
  NAME.inputs.npz    arg0, arg1, ... in entry-computation parameter order (the pytree of
                     arguments flattened exactly like the lowering does)
  NAME.expected.npz  out0, out1, ... the XLA:CPU executable's outputs, in the order of the
                     entry computation's result tuple (a non-tuple result is just out0)
  NAME.json          metadata: true dtypes/shapes of params and outputs, XLA memory stats,
                     compile time, fusion / instruction counts, opcodes, custom-call
                     targets and the comparison tolerance we recommend

Dtypes numpy lacks (bf16, the f8 kinds, f4, s4/u4, s2/u2) are stored in the .npz files as
their raw bit pattern in the same-width unsigned integer (uint16 for bf16, uint8 for f8;
4- and 2-bit types use one uint8 per element holding the bits in the low nibble); the true
XLA dtype is recorded in NAME.json (``dtype``, with ``storage_dtype`` naming the npz dtype).

Determinism: inputs come from ``numpy.random.default_rng(seed)`` with a seed derived from
the sample name (crc32), never from JAX's RNG.  Every sample is lowered in a fresh
subprocess so the HloModuleProto ``id`` (a per-process counter in XLA) is always 0, and
source locations in op metadata keep only the innermost frame with the file's base name,
so the .pb files do not depend on where the repository is checked out or on the driver.
(Editing this file moves the recorded source lines of later samples: regenerate then.)  jit always uses
``keep_unused=True`` so every argument stays an entry parameter.

Regenerate (JAX is a dev-only dependency, never a runtime dependency of hloc):

    python3 -m venv /work/jaxenv && /work/jaxenv/bin/pip install jax jaxlib ml_dtypes
    /work/jaxenv/bin/python samples/generate.py                 # everything
    /work/jaxenv/bin/python samples/generate.py --only mlp      # one sample (or ops/NAME)
    /work/jaxenv/bin/python samples/generate.py --list          # list sample names
    /work/jaxenv/bin/python samples/check.py                    # verify reproducibility

Expected outputs are XLA:CPU's results on the generating machine (XLA:CPU flushes
denormals to zero; transcendental functions may differ by an ulp on other CPUs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

GENERATOR_VERSION = 1
HERE = Path(__file__).resolve().parent

# --------------------------------------------------------------------------------------
# Sample registry
# --------------------------------------------------------------------------------------


@dataclass
class Sample:
    name: str  # "mlp" or "ops/divide_s32_edges"
    description: str
    build: Callable[[np.random.Generator], tuple[Callable, tuple]]
    rtol: float = 1e-5
    atol: float = 1e-6
    x64: bool = False
    notes: list[str] = field(default_factory=list)
    jit_kwargs: dict = field(default_factory=dict)  # extra jax.jit options (e.g. donate_argnums)

    @property
    def seed(self) -> int:
        return zlib.crc32(self.name.encode()) & 0x7FFFFFFF


SAMPLES: dict[str, Sample] = {}


def sample(name: str, description: str, *, rtol=1e-5, atol=1e-6, x64=False, notes=(), jit_kwargs=None):
    """Register a builder ``build(rng) -> (fn, args)``; args is a tuple (pytree) of arrays."""

    def deco(build):
        assert name not in SAMPLES, name
        SAMPLES[name] = Sample(name, description, build, rtol, atol, x64, list(notes), dict(jit_kwargs or {}))
        return build

    return deco


def op_case(name: str, description: str, **kw):
    return sample("ops/" + name, description, **kw)


# --------------------------------------------------------------------------------------
# Input helpers (numpy only: no JAX computation may run before the lowering)
# --------------------------------------------------------------------------------------

F32_EDGES = np.array(
    [
        0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.0, 3.0, 10.0, -10.0, 100.0, -100.0,
        88.0, 89.0, -87.0, -104.0, 1e-7, -1e-7, 1e-30, 1e30, -1e30,
        1.17549435e-38, -1.17549435e-38,  # smallest normal
        1e-39, -1e-39, 1e-45,  # denormals
        3.4028235e38, -3.4028235e38, np.pi, -np.pi / 2, 0.99999994, -0.99999994, 1.0000001,
        np.inf, -np.inf, np.nan,
    ],
    dtype=np.float32,
)

S32_EDGES = np.array(
    [-(2**31), -(2**31) + 1, -65536, -7, -2, -1, 0, 1, 2, 7, 65535, 2**31 - 2, 2**31 - 1],
    dtype=np.int32,
)


def normal(rng, shape, dtype=np.float32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def uniform(rng, shape, lo=-1.0, hi=1.0, dtype=np.float32):
    return rng.uniform(lo, hi, shape).astype(dtype)


def ints(rng, shape, lo, hi, dtype=np.int32):
    return rng.integers(lo, hi, shape, endpoint=False).astype(dtype)


def grid(a, b):
    """All pairs (a[i], b[j]) flattened: used for binary edge-case tables."""
    aa, bb = np.meshgrid(a, b, indexing="ij")
    return aa.reshape(-1).copy(), bb.reshape(-1).copy()


def int_edges(dtype):
    info = np.iinfo(dtype)
    vals = [info.min, info.min + 1, -7, -2, -1, 0, 1, 2, 3, 7, info.max // 2, info.max - 1, info.max]
    return np.array([v for v in vals if info.min <= v <= info.max], dtype=dtype)


def glorot(rng, fan_in, fan_out, dtype=np.float32):
    return (rng.standard_normal((fan_in, fan_out)) * math.sqrt(2.0 / (fan_in + fan_out))).astype(dtype)


# --------------------------------------------------------------------------------------
# Top-level samples (models and feature groups)
# --------------------------------------------------------------------------------------


@sample("mlp", "3-layer MLP on a (19,37) batch: dense+relu, dense+gelu(tanh approx), dense, softmax; "
        "params passed as a dict pytree (flattened in sorted key order).", rtol=1e-5, atol=1e-6)
def _mlp(rng):
    import jax

    params = {
        "b1": normal(rng, (64,), scale=0.1), "b2": normal(rng, (48,), scale=0.1),
        "b3": normal(rng, (10,), scale=0.1), "w1": glorot(rng, 37, 64),
        "w2": glorot(rng, 64, 48), "w3": glorot(rng, 48, 10),
    }
    x = normal(rng, (19, 37))

    def f(params, x):
        h = jax.nn.relu(x @ params["w1"] + params["b1"])
        h = jax.nn.gelu(h @ params["w2"] + params["b2"], approximate=True)
        logits = h @ params["w3"] + params["b3"]
        return jax.nn.softmax(logits, axis=-1), logits

    return f, (params, x)


@sample("cnn", "Small NHWC CNN: conv3x3 SAME + bias + relu, max pool 2x2/2 (reduce-window max), "
        "conv3x3 VALID + relu, 3x3/1 average pool (reduce-window add / count), flatten, dense.",
        rtol=1e-4, atol=1e-5)
def _cnn(rng):
    import jax
    import jax.numpy as jnp
    from jax import lax

    x = normal(rng, (2, 14, 14, 3))
    w1 = normal(rng, (3, 3, 3, 8), scale=0.3)
    b1 = normal(rng, (8,), scale=0.1)
    w2 = normal(rng, (3, 3, 8, 12), scale=0.2)
    b2 = normal(rng, (12,), scale=0.1)
    wd = normal(rng, (3 * 3 * 12, 10), scale=0.1)
    dn = ("NHWC", "HWIO", "NHWC")

    def f(x, w1, b1, w2, b2, wd):
        h = lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=dn) + b1
        h = jax.nn.relu(h)
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")  # 7x7
        h = jax.nn.relu(lax.conv_general_dilated(h, w2, (1, 1), "VALID", dimension_numbers=dn) + b2)
        h = lax.reduce_window(h, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "VALID") / 9.0  # 3x3
        return h.reshape(h.shape[0], -1) @ wd

    return f, (x, w1, b1, w2, b2, wd)


@sample("conv_variants", "Convolution zoo: strided with asymmetric padding, rhs (kernel) dilation, "
        "lhs dilation (transposed conv), depthwise (feature_group_count=C), explicit batch_group_count, "
        "weight gradient of a grouped conv (lowers to batch_group_count), NCHW/OIHW 1-D and 3-D convs.",
        rtol=1e-4, atol=1e-5)
def _conv_variants(rng):
    import jax
    from jax import lax

    x = normal(rng, (2, 11, 13, 6))
    w = normal(rng, (3, 3, 6, 5), scale=0.3)
    wdw = normal(rng, (3, 3, 1, 12), scale=0.3)  # depthwise, multiplier 2
    wt = normal(rng, (4, 4, 6, 4), scale=0.3)
    x1 = normal(rng, (3, 4, 17))  # NCW
    w1 = normal(rng, (5, 4, 3), scale=0.3)  # OIW
    x3 = normal(rng, (1, 2, 5, 6, 7))  # NCDHW
    w3 = normal(rng, (3, 2, 2, 3, 2), scale=0.3)  # OIDHW
    xb = normal(rng, (4, 7, 7, 6))
    wb = normal(rng, (3, 3, 6, 6), scale=0.3)
    wg = normal(rng, (3, 3, 2, 6), scale=0.3)  # 3 groups of 2 input features
    dn = ("NHWC", "HWIO", "NHWC")

    def f(x, w, wdw, wt, x1, w1, x3, w3, xb, wb, wg):
        strided = lax.conv_general_dilated(x, w, (2, 3), ((1, 2), (0, 1)), dimension_numbers=dn)
        dilated = lax.conv_general_dilated(x, w, (1, 1), "VALID", rhs_dilation=(2, 3), dimension_numbers=dn)
        transposed = lax.conv_general_dilated(x, wt, (1, 1), ((2, 2), (3, 1)), lhs_dilation=(2, 2),
                                              dimension_numbers=dn)
        depthwise = lax.conv_general_dilated(x, wdw, (1, 1), "SAME", dimension_numbers=dn,
                                             feature_group_count=6)
        bgc = lax.conv_general_dilated(xb, wb, (1, 1), "VALID", dimension_numbers=dn, batch_group_count=2)
        conv1d = lax.conv_general_dilated(x1, w1, (2,), ((2, 1),), rhs_dilation=(2,),
                                          dimension_numbers=("NCH", "OIH", "NCH"))
        conv3d = lax.conv_general_dilated(x3, w3, (1, 2, 1), "SAME",
                                          dimension_numbers=("NCDHW", "OIDHW", "NCDHW"))

        def grouped_loss(wg):
            y = lax.conv_general_dilated(xb, wg, (1, 1), "SAME", dimension_numbers=dn, feature_group_count=3)
            return (y * y).sum()

        wgrad = jax.grad(grouped_loss)(wg)
        return strided, dilated, transposed, depthwise, bgc, conv1d, conv3d, wgrad

    return f, (x, w, wdw, wt, x1, w1, x3, w3, xb, wb, wg)


def _layernorm(x, g, b, eps=1e-5):
    import jax.numpy as jnp

    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * (1.0 / jnp.sqrt(var + eps)) * g + b


@sample("attention", "Pre-LN transformer block: layernorm, multi-head causal self-attention "
        "(4 heads x 12, einsum with batch dims, where-mask, softmax), residual, layernorm, GELU MLP.",
        rtol=1e-4, atol=1e-5)
def _attention(rng):
    import jax
    import jax.numpy as jnp

    B, T, D, H = 2, 13, 48, 4
    hd = D // H
    p = {
        "ln1_b": normal(rng, (D,), scale=0.1), "ln1_g": 1 + normal(rng, (D,), scale=0.1),
        "ln2_b": normal(rng, (D,), scale=0.1), "ln2_g": 1 + normal(rng, (D,), scale=0.1),
        "w_mlp1": glorot(rng, D, 96), "w_mlp2": glorot(rng, 96, D),
        "w_o": glorot(rng, D, D), "w_qkv": glorot(rng, D, 3 * D),
    }
    x = normal(rng, (B, T, D))

    def f(p, x):
        h = _layernorm(x, p["ln1_g"], p["ln1_b"])
        qkv = h @ p["w_qkv"]
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q = q.reshape(B, T, H, hd)
        k = k.reshape(B, T, H, hd)
        v = v.reshape(B, T, H, hd)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.float32(hd))
        mask = jnp.tril(jnp.ones((T, T), bool))
        s = jnp.where(mask, s, jnp.finfo(jnp.float32).min)
        a = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(B, T, D)
        x = x + o @ p["w_o"]
        h = _layernorm(x, p["ln2_g"], p["ln2_b"])
        x = x + jax.nn.gelu(h @ p["w_mlp1"]) @ p["w_mlp2"]
        return x, a

    return f, (p, x)


@sample("scan_rnn", "tanh RNN with lax.scan over 11 steps (while loop with tuple carry); returns "
        "all hidden states and the final state.", rtol=1e-5, atol=1e-6)
def _scan_rnn(rng):
    import jax.numpy as jnp
    from jax import lax

    T, B, In, Hh = 11, 3, 5, 7
    xs = normal(rng, (T, B, In))
    h0 = normal(rng, (B, Hh), scale=0.5)
    wx = normal(rng, (In, Hh), scale=0.5)
    wh = normal(rng, (Hh, Hh), scale=0.4)
    b = normal(rng, (Hh,), scale=0.1)

    def f(xs, h0, wx, wh, b):
        def step(h, x):
            h = jnp.tanh(x @ wx + h @ wh + b)
            return h, h

        hT, hs = lax.scan(step, h0, xs)
        return hs, hT

    return f, (xs, h0, wx, wh, b)


@sample("fori_loop", "fori_loop (19 iterations) whose body reads rows with dynamic_slice and writes "
        "them with dynamic_update_slice (running prefix recurrence on a (20,7) buffer).")
def _fori_loop(rng):
    from jax import lax

    buf = normal(rng, (20, 7))
    w = normal(rng, (7,), scale=0.5)

    def f(buf, w):
        def body(i, carry):
            buf, acc = carry
            row = lax.dynamic_slice(buf, (i, 0), (1, 7))
            new = row * w + lax.dynamic_slice(buf, (i + 1, 0), (1, 7))
            buf = lax.dynamic_update_slice(buf, new, (i + 1, 0))
            return buf, acc + new.sum()

        return lax.fori_loop(0, 19, body, (buf, 0.0))

    return f, (buf, w)


@sample("while_dynamic", "while_loop with a data-dependent trip count: Collatz step counts for a "
        "vector of s32 (loop until all reach 1) plus a float halving loop until below a threshold.", rtol=0, atol=0)
def _while_dynamic(rng):
    import jax.numpy as jnp
    from jax import lax

    n = np.array([27, 7, 1, 97, 12, 63, 871, 5], np.int32)
    x = np.array([1000.0, 3.5, 0.01], np.float32)
    thresh = np.array(0.75, np.float32)

    def f(n, x, thresh):
        def cond(c):
            v, _, _ = c
            return jnp.any(v != 1)

        def body(c):
            v, steps, it = c
            nxt = jnp.where(v % 2 == 0, v // 2, 3 * v + 1)
            done = v == 1
            return jnp.where(done, v, nxt), steps + (~done).astype(jnp.int32), it + 1

        _, steps, iters = lax.while_loop(cond, body, (n, jnp.zeros_like(n), jnp.int32(0)))
        y, k = lax.while_loop(lambda c: jnp.max(c[0]) > thresh, lambda c: (c[0] * 0.5, c[1] + 1),
                              (x, jnp.int32(0)))
        return steps, iters, y, k

    return f, (n, x, thresh)


@sample("cond", "lax.cond with a data-dependent predicate, taken once true and once false, "
        "branches with different ops and a tuple operand.")
def _cond(rng):
    import jax.numpy as jnp
    from jax import lax

    x = normal(rng, (6, 5))
    y = normal(rng, (5,))
    preds = np.array([True, False])

    def f(x, y, preds):
        def t(ops):
            a, b = ops
            return jnp.sin(a) @ b, a.sum()

        def fl(ops):
            a, b = ops
            return (a * 2.0).max(axis=1) - b[:1], -a.min()

        r1 = lax.cond(preds[0], t, fl, (x, y))
        r2 = lax.cond(preds[1], t, fl, (x, y))
        r3 = lax.cond(x[0, 0] > 0.0, lambda v: v + 1.0, lambda v: v - 1.0, y)
        return r1, r2, r3

    return f, (x, y, preds)


@sample("switch", "lax.switch with 3 branches and data-dependent indices, including out-of-range "
        "indices -1 and 7 (JAX clamps them before the conditional).")
def _switch(rng):
    import jax.numpy as jnp
    from jax import lax

    x = normal(rng, (4, 9))
    idx = np.array([0, 1, 2, -1, 7], np.int32)
    branches = [lambda v: jnp.exp(v).sum(0), lambda v: v.max(0) * 3.0, lambda v: jnp.cos(v[1]) - v[2]]

    def f(x, idx):
        return tuple(lax.switch(idx[i], branches, x) for i in range(5))

    return f, (x, idx)


@sample("sort", "Sorting: multi-operand lax.sort (keys + 2 payloads, 1 key), 2-key sort, "
        "argsort (stable), jnp.sort with NaN/-0.0/inf, descending sort along axis 0.", rtol=0, atol=0)
def _sort(rng):
    import jax.numpy as jnp
    from jax import lax

    keys = ints(rng, (3, 23), 0, 6).astype(np.float32)
    pay1 = ints(rng, (3, 23), -100, 100)
    pay2 = normal(rng, (3, 23))
    k2 = ints(rng, (31,), 0, 3)
    withnan = np.array([3.0, np.nan, -0.0, 0.0, -np.inf, 1.0, np.inf, np.nan, -1.0, 0.0, -0.0, 2.5], np.float32)
    m = normal(rng, (9, 4))

    def f(keys, pay1, pay2, k2, withnan, m):
        s = lax.sort((keys, pay1, pay2), dimension=1, num_keys=1)
        s2 = lax.sort((k2, (jnp.arange(31) * 7 % 5).astype(jnp.float32), jnp.arange(31)), num_keys=2)
        arg = jnp.argsort(keys, axis=-1, stable=True)
        return s, s2, arg, jnp.sort(withnan), jnp.argsort(withnan), -jnp.sort(-m, axis=0)

    return f, (keys, pay1, pay2, k2, withnan, m)


@sample("top_k", "lax.top_k (k=5) on a (5,37) f32 matrix with ties and a NaN row, and on s32.", rtol=0, atol=0)
def _top_k(rng):
    from jax import lax

    x = ints(rng, (5, 37), -20, 20).astype(np.float32)
    x[3, 4] = np.nan
    x[3, 30] = np.inf
    xi = ints(rng, (4, 29), -1000, 1000)

    def f(x, xi):
        return lax.top_k(x, 5), lax.top_k(xi, 3)

    return f, (x, xi)


@sample("gather", "Gathers: x[idx] (negative indices normalized by JAX), take_along_axis, 2-D "
        "point gather, windowed lax.gather with mode=promise_in_bounds and out-of-bounds starts "
        "(XLA clamps), jnp.take mode=clip and mode=fill.", rtol=0, atol=0)
def _gather(rng):
    import jax.numpy as jnp
    from jax import lax

    x = normal(rng, (13, 6))
    idx = np.array([0, 12, -1, 5, 5, -13, 7], np.int32)
    along = ints(rng, (13, 4), 0, 6)
    pts = np.array([[0, 0], [12, 5], [3, 2], [7, 1]], np.int32)
    oob = np.array([[-3, 1], [11, 4], [20, 9], [2, -8]], np.int32)

    def f(x, idx, along, pts, oob):
        a = x[idx]
        b = jnp.take_along_axis(x, along, axis=1)
        c = x[pts[:, 0], pts[:, 1]]
        dn = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0, 1))
        d = lax.gather(x, oob, dn, slice_sizes=(3, 2), mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)
        e = jnp.take(x, jnp.array([1, 15, -20]), axis=0, mode="clip")
        g = jnp.take(x, jnp.array([1, 15, -20]), axis=0, mode="fill", fill_value=-7.0)
        return a, b, c, d, e, g

    return f, (x, idx, along, pts, oob)


@sample("scatter", "Scatters: .at[].add / .max / .min / .mul with duplicate indices (exactly "
        "representable values so order does not matter), .set with unique indices and with "
        "duplicates carrying equal values, mode=clip and default (out-of-bounds dropped).", rtol=0, atol=0)
def _scatter(rng):
    x = ints(rng, (10, 4), -5, 5).astype(np.float32)
    idx = np.array([1, 3, 1, 9, 3, 3, 0], np.int32)
    upd = ints(rng, (7, 4), -8, 8).astype(np.float32)
    xi = ints(rng, (12,), -50, 50)
    idxi = np.array([0, 11, 5, 5, 14, -2, 11], np.int32)
    updi = ints(rng, (7,), -9, 9)
    uidx = np.array([8, 2, 5], np.int32)
    dup_equal = np.array([[4, 4, 4, 4]] * 3, np.float32)

    def f(x, idx, upd, xi, idxi, updi, uidx, dup_equal):
        return (
            x.at[idx].add(upd),
            x.at[idx].max(upd),
            x.at[idx].min(upd),
            x.at[idx[:4]].multiply(upd[:4] * 0.5),
            x.at[uidx].set(upd[:3]),
            x.at[np.array([6, 6, 6])].set(dup_equal),
            xi.at[idxi].add(updi, mode="clip"),
            xi.at[idxi].add(updi),  # default: out-of-bounds updates dropped
            xi.at[idxi].set(updi * 0 + 99, mode="clip"),
        )

    return f, (x, idx, upd, xi, idxi, updi, uidx, dup_equal)


@sample("random", "jax.random with the default threefry2x32 impl (split, normal, uniform, bits, randint, "
        "bernoulli) and with the 'rbg' and 'unsafe_rbg' impls (rng-bit-generator); raw key data is "
        "passed as a u32 argument.", rtol=1e-6, atol=1e-6)
def _random(rng):
    import jax
    import jax.numpy as jnp

    k_tf = np.array([0, 42], np.uint32)
    k_rbg = np.array([1, 2, 3, 4], np.uint32)
    k_urbg = np.array([5, 6, 7, 8], np.uint32)

    def f(k_tf, k_rbg, k_urbg):
        k = jax.random.wrap_key_data(k_tf, impl="threefry2x32")
        k1, k2, k3, k4, k5 = jax.random.split(k, 5)
        out = [
            jax.random.normal(k1, (37, 5)),
            jax.random.uniform(k2, (11, 7), minval=-2.0, maxval=3.0),
            jax.random.bits(k3, (9,), dtype=jnp.uint32),
            jax.random.randint(k4, (6, 6), -10, 1000),
            jax.random.bernoulli(k5, 0.3, (17,)),
            jax.random.key_data(k2),
        ]
        for kd, impl in ((k_rbg, "rbg"), (k_urbg, "unsafe_rbg")):
            kk = jax.random.wrap_key_data(kd, impl=impl)
            a, b = jax.random.split(kk)
            out += [jax.random.normal(a, (13, 3)), jax.random.bits(b, (10,), dtype=jnp.uint32),
                    jax.random.uniform(kk, (8,))]
        return tuple(out)

    return f, (k_tf, k_rbg, k_urbg)


def _mlp_loss(p, x, y):
    import jax
    import jax.numpy as jnp

    h = jnp.tanh(x @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()


@sample("grads", "jax.grad of a small CNN loss with max pooling (select-and-scatter in the backward "
        "pass) w.r.t. conv weights and input, and value_and_grad of an MLP cross-entropy loss.",
        rtol=1e-4, atol=1e-5)
def _grads(rng):
    import jax
    import jax.numpy as jnp
    from jax import lax

    x = normal(rng, (2, 10, 10, 3))
    w = normal(rng, (3, 3, 3, 4), scale=0.3)
    p = {"b1": normal(rng, (16,), scale=0.1), "b2": normal(rng, (5,), scale=0.1),
         "w1": glorot(rng, 9, 16), "w2": glorot(rng, 16, 5)}
    xm = normal(rng, (12, 9))
    ym = ints(rng, (12,), 0, 5)

    def cnn_loss(w, x):
        h = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jax.nn.relu(h)
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        return jnp.mean(h**2)

    def f(w, x, p, xm, ym):
        gw, gx = jax.grad(cnn_loss, argnums=(0, 1))(w, x)
        loss, gp = jax.value_and_grad(_mlp_loss)(p, xm, ym)
        return gw, gx, loss, gp

    return f, (w, x, p, xm, ym)


@sample("dtype_zoo", "Mixed dtypes: bf16 and f16 arithmetic/exp/dot/reduce; s8/u8/s16/u32 arithmetic "
        "with wraparound; shifts, popcount, clz; bitcast_convert_type (f32<->s32, f32<->u8[4], "
        "u16[2]->f32); float->int converts with NaN/inf/out-of-range; pred logic; integer div/rem "
        "(lax truncating and jnp floor semantics) with negative operands.", rtol=1e-5, atol=1e-6)
def _dtype_zoo(rng):
    import jax.numpy as jnp
    from jax import lax
    from ml_dtypes import bfloat16

    abf = normal(rng, (6, 7)).astype(bfloat16)
    bbf = normal(rng, (7, 5)).astype(bfloat16)
    ah = normal(rng, (6, 7)).astype(np.float16)
    bh = normal(rng, (6, 7)).astype(np.float16)
    i8a, i8b = int_edges(np.int8), np.array([1, -1, 2, -2, 127, -128, 3, 100, -100, 5, 7, 9, 0], np.int8)
    u8 = np.array([0, 1, 2, 127, 128, 200, 254, 255, 3, 100, 17, 250], np.uint8)
    i16 = np.array([-32768, -32767, -1, 0, 1, 300, 32767, 1000, -1000, 255, 256, 12345], np.int16)
    u32 = np.array([0, 1, 2**31, 2**32 - 1, 123456789, 65536, 7, 2**31 - 1, 3, 99, 4096, 10], np.uint32)
    sh = np.array([0, 1, 3, 7, 8, 15, 16, 31, 2, 5, 30, 4], np.int32)
    s32 = np.array([-7, 7, -7, 7, -(2**31), 0, 1, -1, 100, -100, 13, -13], np.int32)
    d32 = np.array([2, -2, -2, 2, -1, 5, 3, 3, 7, 7, -4, 4], np.int32)
    fbad = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.5, -2.5, -0.5, 0.999, 2147483520.0, -2147483648.0, 300.7],
                    np.float32)
    pa = np.array([True, False, True, False] * 3)
    pb = np.array([True, True, False, False] * 3)

    def f(abf, bbf, ah, bh, i8a, i8b, u8, i16, u32, sh, s32, d32, fbad, pa, pb):
        bf_out = (abf * abf[::-1] + 1.5, jnp.exp(abf), abf @ bbf, abf.sum(axis=1), abf / (jnp.abs(abf) + 0.25))
        f16_out = (ah * bh - ah, jnp.tanh(ah), ah / bh, (ah @ bh.T).astype(jnp.float32), ah.max(axis=0))
        int_out = (
            i8a + i8b, i8a * i8b, -i8a, jnp.abs(i8a), i8a - i8b,
            u8 + u8[::-1], u8 - u8[::-1], u8 * 3,
            i16 * 3, i16 + i16[::-1],
            u32 * u32[::-1], u32 + u32, u32 >> sh.astype(jnp.uint32),
        )
        bit_out = (
            lax.shift_left(s32, sh), lax.shift_right_arithmetic(s32, sh), lax.shift_right_logical(s32, sh),
            lax.population_count(s32), lax.clz(s32), lax.population_count(u8), lax.clz(i16),
            lax.bitcast_convert_type(fbad, jnp.int32), lax.bitcast_convert_type(s32, jnp.float32),
            lax.bitcast_convert_type(fbad, jnp.uint8),
            lax.bitcast_convert_type(lax.bitcast_convert_type(fbad, jnp.uint16), jnp.float32),
            s32 & d32, s32 | d32, s32 ^ d32, ~s32,
        )
        conv_out = (
            lax.convert_element_type(fbad, jnp.int32), lax.convert_element_type(fbad, jnp.uint8),
            lax.convert_element_type(fbad, jnp.int8), lax.convert_element_type(fbad, jnp.uint32),
            lax.convert_element_type(fbad, jnp.int16), lax.convert_element_type(s32, jnp.int8),
            lax.convert_element_type(s32, jnp.float16), lax.convert_element_type(u32, jnp.float32),
            fbad.astype(jnp.bfloat16), lax.convert_element_type(s32, jnp.bool_),
        )
        pred_out = (pa & pb, pa | pb, pa ^ pb, ~pa, jnp.where(pa, s32, d32), pa == pb, pa < pb)
        div_out = (lax.div(s32, d32), lax.rem(s32, d32), s32 // d32, s32 % d32,
                   lax.div(i8a, i8b), lax.rem(i8a, i8b), lax.div(u8, u8[::-1] | 1))
        return bf_out, f16_out, int_out, bit_out, conv_out, pred_out, div_out

    return f, (abf, bbf, ah, bh, i8a, i8b, u8, i16, u32, sh, s32, d32, fbad, pa, pb)


@sample("dtype_zoo_x64", "x64 mode (jax_enable_x64): f64 math and dot, s64/u64 arithmetic with "
        "wraparound, shifts, popcount/clz, s64 div/rem, f64->s64/u64 converts with NaN/inf, s64 cumsum, "
        "u64 bitcasts.", rtol=1e-12, atol=1e-14, x64=True)
def _dtype_zoo_x64(rng):
    import jax.numpy as jnp
    from jax import lax

    a = normal(rng, (5, 6), np.float64)
    b = normal(rng, (6, 4), np.float64)
    s64 = np.array([-(2**63), -(2**63) + 1, -(2**40), -7, -1, 0, 1, 7, 2**40, 2**62, 2**63 - 1, 12345], np.int64)
    d64 = np.array([-1, 1, 3, 2, -2, 5, -3, -7, 7, -5, 2, 10], np.int64)
    u64 = np.array([0, 1, 2**63, 2**64 - 1, 2**32, 2**32 - 1, 7, 12345678901234, 3, 99, 2**40, 5], np.uint64)
    sh = np.array([0, 1, 31, 32, 33, 63, 64, 70, 5, 7, 12, 40], np.int64)
    fbad = np.array([np.nan, np.inf, -np.inf, 1e19, -1e19, 9.2e18, -2.5, 2.5, 1e300, 5e-324, -0.0, 123.0], np.float64)

    def f(a, b, s64, d64, u64, sh, fbad):
        return (
            a @ b, jnp.exp(a), jnp.log1p(jnp.abs(a)), jnp.sin(a), jnp.tanh(a), a.sum(0),
            s64 + s64[::-1], s64 * d64, -s64, jnp.abs(s64), lax.div(s64, d64), lax.rem(s64, d64),
            s64 // d64, s64 % d64,
            u64 * u64[::-1], u64 - u64[::-1], u64 >> sh.astype(jnp.uint64), lax.shift_left(s64, sh),
            lax.shift_right_arithmetic(s64, sh), lax.population_count(u64), lax.clz(s64),
            lax.convert_element_type(fbad, jnp.int64), lax.convert_element_type(fbad, jnp.uint64),
            lax.convert_element_type(s64, jnp.float64), lax.convert_element_type(u64, jnp.float32),
            fbad * 2.0, lax.bitcast_convert_type(fbad, jnp.uint64), lax.bitcast_convert_type(fbad, jnp.uint32),
            jnp.cumsum(s64), jnp.arange(10, dtype=jnp.int64) * (2**40),
        )

    return f, (a, b, s64, d64, u64, sh, fbad)


@sample("dtype_f8", "8-bit floats and 4-bit ints: f32 -> f8e4m3fn / f8e5m2 / f8e4m3 / f8e3m4 converts "
        "(round-to-nearest-even, overflow, NaN), f8 arithmetic (computed in f32 by XLA), f8 -> f32, "
        "s4/u4 round trips and arithmetic.", rtol=0, atol=0)
def _dtype_f8(rng):
    import jax.numpy as jnp
    from ml_dtypes import float8_e4m3fn, float8_e5m2, int4

    x = np.concatenate([F32_EDGES, normal(rng, (26,), scale=30.0), np.array([448.0, 449.0, 480.0, 57344.0,
                        61440.0, 0.0625, 0.001953125, 0.0009765625], np.float32)]).astype(np.float32)
    a8 = normal(rng, (24,), scale=4.0).astype(float8_e4m3fn)
    b8 = normal(rng, (24,), scale=4.0).astype(float8_e5m2)
    i4 = np.array([-8, -7, -1, 0, 1, 3, 7, 5, -3, 2, 6, -5], np.int8).astype(int4)
    s8 = np.array([-128, -9, -8, -1, 0, 7, 8, 15, 16, 100, 127, -100], np.int8)

    def f(x, a8, b8, i4, s8):
        return (
            x.astype(jnp.float8_e4m3fn), x.astype(jnp.float8_e5m2), x.astype(jnp.float8_e4m3),
            x.astype(jnp.float8_e3m4), x.astype(jnp.float8_e4m3fn).astype(jnp.float32),
            a8 * a8[::-1] + a8, a8.astype(jnp.float32), b8 * b8 - b8[::-1], b8.astype(jnp.bfloat16),
            a8.astype(jnp.float8_e5m2),
            i4.astype(jnp.int32), i4 + i4[::-1], s8.astype(jnp.int4), s8.astype(jnp.uint4),
            (s8.astype(jnp.int4).astype(jnp.int32) * 3),
        )

    return f, (x, a8, b8, i4, s8)


@sample("math", "Elementwise math on edge values (0, -0, +-inf, NaN, denormals, +-FLT_MAX, ...): exp log "
        "log1p expm1 tanh logistic erf erfc erf_inv lgamma digamma atan2 pow rsqrt sqrt cbrt sin cos tan "
        "asin acos atan sinh cosh asinh acosh atanh floor ceil round sign abs nextafter.",
        rtol=2e-5, atol=1e-6, notes=["XLA:CPU flushes denormal inputs and results to zero."])
def _math(rng):
    import jax.numpy as jnp
    from jax import lax

    x = np.concatenate([F32_EDGES, uniform(rng, (24,), -6, 6)]).astype(np.float32)
    u = np.concatenate([np.array([-1.0, 1.0, -0.0, 0.0, 0.5, -0.5, 0.99999994, -0.99999994, 1.5, np.nan], np.float32),
                        uniform(rng, (52,), -1, 1)]).astype(np.float32)
    y = x[::-1].copy()

    def f(x, u, y):
        return (
            jnp.exp(x), jnp.log(x), jnp.log1p(x), jnp.expm1(x), jnp.tanh(x), lax.logistic(x),
            lax.erf(x), lax.erfc(x), lax.erf_inv(u), lax.lgamma(x), lax.digamma(x),
            lax.atan2(x, y), lax.pow(x, y), lax.rsqrt(x), jnp.sqrt(x), lax.cbrt(x),
            jnp.sin(x), jnp.cos(x), jnp.tan(x), jnp.arcsin(u), jnp.arccos(u), jnp.arctan(x),
            jnp.sinh(x), jnp.cosh(x), jnp.arcsinh(x), jnp.arccosh(x), jnp.arctanh(u),
            jnp.floor(x), jnp.ceil(x), jnp.round(x), lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
            jnp.sign(x), jnp.abs(x), lax.nextafter(x, y), jnp.exp2(x), jnp.log2(x), jnp.log10(x),
            x * y, x / y, x + y, x - y, jnp.maximum(x, y), jnp.minimum(x, y), jnp.square(x),
        )

    return f, (x, u, y)


@sample("reductions", "Reductions: sum/max/min/prod over various axes, mean/var, argmax/argmin "
        "(variadic reduce, ties and NaN), any/all, s32 sum, cumsum/cumprod/cummax/cummin "
        "(reduce-window), logsumexp, reductions over NaN-containing data.", rtol=2e-5, atol=1e-5)
def _reductions(rng):
    import jax
    import jax.numpy as jnp
    from jax import lax

    x = normal(rng, (13, 17, 6))
    t = ints(rng, (9, 10), 0, 4).astype(np.float32)  # many ties
    nanx = normal(rng, (5, 8))
    nanx[1, 3] = np.nan
    nanx[4, 0] = np.nan
    xi = ints(rng, (7, 11), -1000, 1000)
    pr = 1.0 + uniform(rng, (4, 9), -0.3, 0.3)
    b = rng.random((6, 5)) > 0.3

    def f(x, t, nanx, xi, pr, b):
        return (
            x.sum(0), x.sum((1, 2)), x.sum(), x.max(1), x.min(2), pr.prod(1), x.mean(0), x.var(2),
            jnp.argmax(t, 1), jnp.argmin(t, 0), jnp.argmax(nanx, 1), nanx.max(1), nanx.sum(0),
            b.any(0), b.all(1), xi.sum(1), xi.max(0), xi.prod(0),
            jnp.cumsum(x[:, :, 0], axis=1), jnp.cumprod(pr, axis=1), lax.cummax(t, axis=0),
            lax.cummin(xi, axis=1), jnp.cumsum(xi, axis=0), lax.cumsum(t, axis=1, reverse=True),
            jax.nn.logsumexp(x, axis=-1), jax.nn.logsumexp(nanx, axis=0),
        )

    return f, (x, t, nanx, xi, pr, b)


@sample("layout_ops", "Data movement: transpose, reshape, broadcast_in_dim, pad with negative and "
        "interior padding, concatenate, reverse, strided slice, iota, clamp, select, tile, roll, "
        "triu, stack, expand/squeeze.", rtol=0, atol=0)
def _layout_ops(rng):
    import jax.numpy as jnp
    from jax import lax

    x = normal(rng, (5, 7, 3))
    y = normal(rng, (5, 2, 3))
    lo = normal(rng, (5, 7, 3), scale=0.3) - 0.5
    hi = lo + 1.0
    p = rng.random((5, 7, 3)) > 0.5
    m = normal(rng, (6, 6))

    def f(x, y, lo, hi, p, m):
        return (
            jnp.transpose(x, (2, 0, 1)), x.reshape(3, 35), x.reshape(35, 3).T,
            lax.broadcast_in_dim(y[:, 0, :], (4, 5, 2, 3), (1, 3)),
            lax.pad(x, np.float32(0.5), [(-1, 2, 1), (2, -3, 0), (0, 1, 2)]),
            jnp.concatenate([x, y, x[:, :1]], axis=1), lax.rev(x, (0, 2)),
            lax.slice(x, (1, 0, 0), (5, 7, 3), (2, 3, 2)), lax.broadcasted_iota(jnp.int32, (4, 6), 1),
            lax.clamp(lo, x, hi), jnp.clip(x, -0.5, 0.25), lax.select(p, x, lo),
            jnp.tile(y, (2, 1, 2)), jnp.roll(x, 3, axis=1), jnp.triu(m, 1), jnp.stack([m, m.T], 1),
            x[None, :, None, 1:3, 0], jnp.squeeze(y[:, :1, :], 1), x[::-1, 1::2, ::2],
        )

    return f, (x, y, lo, hi, p, m)


@sample("batchnorm", "BatchNorm in training mode (like flax nn.BatchNorm(use_running_average=False)) "
        "on NHWC: batch statistics over N,H,W, normalize, scale/shift, running-stat update with "
        "momentum 0.9, followed by relu; plus its gradient w.r.t. input, scale and bias.",
        rtol=1e-4, atol=1e-5)
def _batchnorm(rng):
    import jax
    import jax.numpy as jnp

    x = normal(rng, (8, 6, 5, 7), scale=2.0) + 0.5
    gamma = 1 + normal(rng, (7,), scale=0.1)
    beta = normal(rng, (7,), scale=0.1)
    rmean = np.zeros((7,), np.float32)
    rvar = np.ones((7,), np.float32)

    def bn(x, gamma, beta, rmean, rvar):
        mean = x.mean((0, 1, 2))
        var = jnp.mean(jnp.square(x), (0, 1, 2)) - jnp.square(mean)
        y = (x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta
        return jax.nn.relu(y), 0.9 * rmean + 0.1 * mean, 0.9 * rvar + 0.1 * var

    def f(x, gamma, beta, rmean, rvar):
        out = bn(x, gamma, beta, rmean, rvar)
        grads = jax.grad(lambda x, g, b: (bn(x, g, b, rmean, rvar)[0] ** 2).sum(), argnums=(0, 1, 2))(x, gamma, beta)
        return out, grads

    return f, (x, gamma, beta, rmean, rvar)


@sample("complex", "c64 arithmetic: add/mul/div, abs, real/imag/conj, complex(), exp/log/sqrt, angle, "
        "complex dot, sum.", rtol=1e-5, atol=1e-5)
def _complex(rng):
    import jax.numpy as jnp
    from jax import lax

    a = (normal(rng, (9, 11)) + 1j * normal(rng, (9, 11))).astype(np.complex64)
    b = (normal(rng, (9, 11)) + 1j * normal(rng, (9, 11))).astype(np.complex64)
    re = normal(rng, (9, 11))

    def f(a, b, re):
        return (a + b, a * b, a / b, jnp.abs(a), a.real, jnp.imag(b), jnp.conj(a), lax.complex(re, re * 2),
                jnp.exp(a), jnp.log(a), jnp.sqrt(a), jnp.angle(b), a @ b.T, a.sum(0), a * re)

    return f, (a, b, re)


@sample("fft", "FFTs (HLO fft op): fft/ifft of length 24 along the last axis, rfft/irfft of length 30, "
        "fft2 over (6,10), rfftn over 2 axes.", rtol=1e-4, atol=1e-4)
def _fft(rng):
    import jax.numpy as jnp

    z = (normal(rng, (4, 24)) + 1j * normal(rng, (4, 24))).astype(np.complex64)
    r = normal(rng, (3, 30))
    z2 = (normal(rng, (2, 6, 10)) + 1j * normal(rng, (2, 6, 10))).astype(np.complex64)

    def f(z, r, z2):
        rf = jnp.fft.rfft(r)
        return (jnp.fft.fft(z), jnp.fft.ifft(z), rf, jnp.fft.irfft(rf, n=30), jnp.fft.fft2(z2),
                jnp.fft.rfftn(r.reshape(3, 5, 6), axes=(1, 2)))

    return f, (z, r, z2)


@sample("linalg", "Dense linear algebra through jnp.linalg: cholesky, triangular solve, LU solve, "
        "QR, eigh. On CPU these lower to LAPACK custom-calls (see custom_call_targets).",
        rtol=1e-3, atol=1e-4)
def _linalg(rng):
    import jax.numpy as jnp
    from jax.scipy.linalg import solve_triangular

    a = normal(rng, (6, 6))
    spd = (a @ a.T + 6 * np.eye(6)).astype(np.float32)
    b = normal(rng, (6, 3))

    def f(spd, a, b):
        L = jnp.linalg.cholesky(spd)
        return (L, solve_triangular(L, b, lower=True), jnp.linalg.solve(a, b), jnp.abs(jnp.linalg.qr(a)[1]),
                jnp.linalg.eigh(spd)[0])

    return f, (spd, a, b)


@op_case("linalg_in_loop", "LAPACK calls inside loops, as filters and optimizers make them: a "
         "scan whose step solves a small system (LU), factors a covariance (Cholesky), takes a "
         "log-determinant, a QR and an eigendecomposition, in f32 and f64. The CPU runtime runs "
         "each call as a native job inside the loop's native driver (runtime/cpu/hostops.py).",
         rtol=1e-4, atol=1e-5, x64=True)
def _linalg_in_loop(rng):
    import jax
    import jax.numpy as jnp
    from jax import lax

    n, steps = 4, 40
    a = (0.2 * normal(rng, (n, n)) + 0.6 * np.eye(n)).astype(np.float32)
    q = (0.1 * np.eye(n)).astype(np.float32)
    ys = normal(rng, (steps, n))
    x64 = normal(rng, (3, 3), np.float64)

    def f(a, q, ys, x64):
        def step(carry, y):  # a Kalman filter observing the whole state
            p, mu, ll = carry
            pp = a @ p @ a.T + q
            s = pp + jnp.float32(0.5) * jnp.eye(n, dtype=jnp.float32)
            k = jnp.linalg.solve(s, pp).T
            predicted = a @ mu
            mu = predicted + k @ (y - predicted)
            chol = jnp.linalg.cholesky(s)
            _, logdet = jnp.linalg.slogdet(s)
            r = jnp.linalg.qr(s)[1]
            w = jnp.linalg.eigh(s)[0]
            p = pp - k @ pp
            return (p, mu, ll + logdet + jnp.sum(jnp.abs(jnp.diag(r))) + w[0]), chol[-1]

        start = (jnp.eye(n, dtype=jnp.float32), jnp.zeros(n, jnp.float32), jnp.float32(0))
        (p, mu, ll), rows = lax.scan(step, start, ys)

        def refine(i, m):
            eye = jnp.eye(3, dtype=m.dtype)
            return jnp.linalg.solve(m + i * eye, m) + jnp.linalg.inv(m.T @ m + eye)
        return p, mu, ll, rows, lax.fori_loop(0, 5, refine, x64)

    return f, (a, q, ys, x64)


@sample("nested_calls", "Nested jit (HLO call), jax.checkpoint under grad (remat: optimization "
        "barrier), vmap of a dot, custom_jvp function.", rtol=1e-5, atol=1e-6)
def _nested_calls(rng):
    import jax
    import jax.numpy as jnp

    x = normal(rng, (8, 5))
    w = normal(rng, (5, 5))

    @jax.jit
    def inner(a, b):
        return jnp.tanh(a @ b)

    @jax.custom_jvp
    def softplus(v):
        return jnp.logaddexp(v, 0.0)

    softplus.defjvp(lambda p, t: (softplus(p[0]), jax.nn.sigmoid(p[0]) * t[0]))

    def f(x, w):
        y = inner(x, w) + inner(x * 2.0, w)
        g = jax.grad(lambda w: jax.checkpoint(lambda w: jnp.sin(inner(x, w)).sum())(w))(w)
        v = jax.vmap(lambda r: r @ w)(x)
        s = jax.grad(lambda v: softplus(v).sum())(x)
        return y, g, v, s

    return f, (x, w)


@sample("embedding_grad", "Embedding lookup (gather) and its gradient (scatter-add with duplicate "
        "token ids), small transformer-style tied softmax.", rtol=1e-4, atol=1e-5)
def _embedding_grad(rng):
    import jax
    import jax.numpy as jnp

    emb = normal(rng, (50, 16), scale=0.5)
    tok = ints(rng, (3, 9), 0, 50)
    tok[0, :3] = 7

    def f(emb, tok):
        def loss(emb):
            h = emb[tok]
            logits = jnp.einsum("btd,vd->btv", h, emb)
            return -jax.nn.log_softmax(logits)[..., 0].mean()

        return jax.value_and_grad(loss)(emb)

    return f, (emb, tok)


@sample("searchsorted_unique", "jnp.searchsorted (left/right), jnp.unique(size=) and jnp.bincount"
        "(length=), histogram-like integer ops.", rtol=0, atol=0)
def _searchsorted_unique(rng):
    import jax.numpy as jnp

    a = np.sort(ints(rng, (20,), 0, 30)).astype(np.float32)
    q = uniform(rng, (9,), -2, 32)
    v = ints(rng, (25,), 0, 8)

    def f(a, q, v):
        return (jnp.searchsorted(a, q), jnp.searchsorted(a, q, side="right"),
                jnp.searchsorted(a, a[::3], side="left", method="sort"),
                jnp.unique(v, size=10, fill_value=-1), jnp.bincount(v, length=8))

    return f, (a, q, v)


@sample("donation", "jax.jit with donate_argnums=(0, 2): the HloModuleProto carries "
        "input_output_alias entries (output {0} <- param 0, output {2} <- param 2) like an in-place "
        "optimizer step (SGD with momentum) on a params buffer.", rtol=1e-6, atol=1e-7,
        jit_kwargs={"donate_argnums": (0, 2)})
def _donation(rng):
    w = normal(rng, (33, 17))
    g = normal(rng, (33, 17))
    m = normal(rng, (33, 17), scale=0.1)
    lr = np.array(0.05, np.float32)

    def f(w, g, m, lr):
        m2 = 0.9 * m + g
        w2 = w - lr * m2
        return w2, (w2 * w2).sum(), m2

    return f, (w, g, m, lr)


@sample("attention_grad", "value_and_grad of the attention block (layernorm, causal MHA, GELU MLP) "
        "w.r.t. all parameters: transposed dots, reductions for layernorm/softmax backward.",
        rtol=2e-4, atol=1e-5)
def _attention_grad(rng):
    import jax

    f_fwd, (p, x) = _attention(rng)

    def f(p, x):
        return jax.value_and_grad(lambda p: (f_fwd(p, x)[0] ** 2).mean())(p)

    return f, (p, x)


# --------------------------------------------------------------------------------------
# Per-op edge cases (samples/ops/)
# --------------------------------------------------------------------------------------


@op_case("divide_s32_edges", "lax.div (HLO divide) on s32/u32/s8/s16 with INT_MIN/-1 (=INT_MIN), x/0 "
         "(=-1 for signed, all-ones for unsigned), truncation toward zero with negative operands.",
         rtol=0, atol=0)
def _divide_s32(rng):
    from jax import lax

    a, b = grid(S32_EDGES, np.array([-(2**31), -7, -2, -1, 0, 1, 2, 3, 7, 2**31 - 1], np.int32))
    ua, ub = grid(np.array([0, 1, 7, 2**31, 2**32 - 1], np.uint32), np.array([0, 1, 2, 3, 2**32 - 1], np.uint32))
    a8, b8 = grid(int_edges(np.int8), np.array([-128, -1, 0, 1, 3, 127], np.int8))
    a16, b16 = grid(int_edges(np.int16), np.array([-32768, -1, 0, 2, -5], np.int16))

    def f(a, b, ua, ub, a8, b8, a16, b16):
        return lax.div(a, b), lax.div(ua, ub), lax.div(a8, b8), lax.div(a16, b16)

    return f, (a, b, ua, ub, a8, b8, a16, b16)


@op_case("remainder_s32_edges", "lax.rem (HLO remainder) on s32/u32/s8 (sign follows dividend, x%0 = x, "
         "INT_MIN % -1 = 0) and f32 fmod with inf/NaN/-0.", rtol=0, atol=0)
def _remainder(rng):
    from jax import lax

    a, b = grid(S32_EDGES, np.array([-(2**31), -7, -2, -1, 0, 1, 2, 3, 7, 2**31 - 1], np.int32))
    ua, ub = grid(np.array([0, 1, 7, 2**31, 2**32 - 1], np.uint32), np.array([0, 1, 2, 3, 2**32 - 1], np.uint32))
    a8, b8 = grid(int_edges(np.int8), np.array([-128, -1, 0, 1, 3, 127], np.int8))
    fa, fb = grid(np.array([0.0, -0.0, 5.5, -5.5, 1e30, np.inf, -np.inf, np.nan, 7.0], np.float32),
                  np.array([0.0, -0.0, 2.0, -2.0, 0.75, np.inf, -np.inf, np.nan, 1e-3], np.float32))

    def f(a, b, ua, ub, a8, b8, fa, fb):
        return lax.rem(a, b), lax.rem(ua, ub), lax.rem(a8, b8), lax.rem(fa, fb)

    return f, (a, b, ua, ub, a8, b8, fa, fb)


@op_case("shift_right_logical_oob", "Shifts with amounts 0..40 and negative (as unsigned huge): "
         "shift-left / shift-right-logical give 0 and shift-right-arithmetic gives the sign fill for "
         "amounts >= bit width; s32, u32, s8, u8, s16.", rtol=0, atol=0)
def _shifts(rng):
    import jax.numpy as jnp
    from jax import lax

    amts = np.array([0, 1, 7, 8, 15, 16, 31, 32, 33, 40, -1, -32, 2**31 - 1], np.int32)
    v, s = grid(np.array([1, -1, -(2**31), 2**31 - 1, 0x12345678, -0x12345678], np.int32), amts)
    v8, s8 = grid(np.array([1, -1, -128, 127, 0x5A], np.int8), np.array([0, 1, 7, 8, 9, 100, -1, -128], np.int8))
    v16, s16 = grid(np.array([1, -1, -32768, 0x1234], np.int16), np.array([0, 3, 15, 16, 17, -1], np.int16))

    def f(v, s, v8, s8, v16, s16):
        u, su = v.astype(jnp.uint32), s.astype(jnp.uint32)
        ub, sub = v8.astype(jnp.uint8), s8.astype(jnp.uint8)
        return (
            lax.shift_right_logical(v, s), lax.shift_right_arithmetic(v, s), lax.shift_left(v, s),
            lax.shift_right_logical(u, su), lax.shift_right_arithmetic(u, su), lax.shift_left(u, su),
            lax.shift_right_logical(v8, s8), lax.shift_right_arithmetic(v8, s8), lax.shift_left(v8, s8),
            lax.shift_right_logical(ub, sub), lax.shift_left(ub, sub),
            lax.shift_right_logical(v16, s16), lax.shift_right_arithmetic(v16, s16), lax.shift_left(v16, s16),
        )

    return f, (v, s, v8, s8, v16, s16)


@op_case("convert_f32_s32_saturate", "convert f32/f16/bf16 -> s32/u32/s8/u8/s16/u16 with "
         "NaN (->0), +-inf and out-of-range (saturate), truncation toward zero; s32->f32/f16 rounding; "
         "s32->s8/u8 and u32->s32 wraparound; int/float -> pred.", rtol=0, atol=0)
def _convert_sat(rng):
    import jax.numpy as jnp
    from jax import lax

    x = np.concatenate([F32_EDGES, np.array([2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0,
                        4294967040.0, 4294967296.0, 255.9, 256.0, -128.9, -129.0, 127.5, 65535.9, 65536.0,
                        -32768.9, -32769.0, 0.9999, -0.9999], np.float32)])
    xi = np.concatenate([S32_EDGES, np.array([16777217, 16777219, -16777217, 33554435, 2049, 65520, 65519, 300,
                         -300, 255, 256, 128], np.int32)])
    xu = np.array([0, 1, 2**31 - 1, 2**31, 2**32 - 1, 16777217, 4294967040, 4294967295], np.uint32)

    def f(x, xi, xu):
        xh, xb = x.astype(jnp.float16), x.astype(jnp.bfloat16)
        cv = lax.convert_element_type
        return (
            cv(x, jnp.int32), cv(x, jnp.uint32), cv(x, jnp.int8), cv(x, jnp.uint8), cv(x, jnp.int16),
            cv(x, jnp.uint16), cv(x, jnp.bool_), cv(xh, jnp.int32), cv(xh, jnp.int8), cv(xb, jnp.int32),
            cv(xb, jnp.uint16), cv(xi, jnp.float32), cv(xi, jnp.float16), cv(xi, jnp.bfloat16),
            cv(xi, jnp.int8), cv(xi, jnp.uint8), cv(xi, jnp.uint32), cv(xi, jnp.int16), cv(xi, jnp.bool_),
            cv(xu, jnp.int32), cv(xu, jnp.float32), cv(xu, jnp.uint8),
        )

    return f, (x, xi, xu)


@op_case("convert_f32_bf16_round", "convert f32 -> bf16 / f16 / f8e4m3fn / f8e5m2 (round to nearest "
         "even at exact ties, overflow to inf or NaN, denormals, NaN) and back to f32; f16 <-> bf16.",
         rtol=0, atol=0)
def _convert_round(rng):
    import jax.numpy as jnp

    ties = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F80FFFF, 0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF,
                     0x00008000, 0x00018000, 0x80408000, 0x33800000, 0x33800001, 0x387FC000, 0x38800000,
                     0x477FE000, 0x477FF000, 0x477FEFFF, 0x43E00000, 0x43E80000, 0x43F00000], np.uint32).view(np.float32)
    x = np.concatenate([F32_EDGES, ties, normal(rng, (16,), scale=100.0)]).astype(np.float32)

    def f(x):
        bf = x.astype(jnp.bfloat16)
        h = x.astype(jnp.float16)
        return (bf, h, x.astype(jnp.float8_e4m3fn), x.astype(jnp.float8_e5m2), bf.astype(jnp.float32),
                h.astype(jnp.float32), h.astype(jnp.bfloat16), bf.astype(jnp.float16))

    return f, (x,)


@op_case("compare_totalorder_nan", "HLO compare on f32 with NaN/-0/+-inf: all six directions with "
         "type=FLOAT (NaN compares false except NE) and EQ/LT/LE with type=TOTALORDER "
         "(-NaN < -inf < ... < -0 < +0 < ... < inf < NaN); also s32 SIGNED and u32 UNSIGNED.",
         rtol=0, atol=0)
def _compare(rng):
    import jax.numpy as jnp
    from jax import lax
    from jax._src.lax.lax import eq_to_p, le_to_p, lt_to_p

    vals = np.array([np.nan, -np.inf, -1.0, -0.0, 0.0, 1e-45, 1.0, np.inf,
                     np.uint32(0xFFC00000).view(np.float32)], np.float32)  # last: negative NaN
    a, b = grid(vals, vals)
    ia, ib = grid(np.array([-(2**31), -1, 0, 1, 2**31 - 1], np.int32), np.array([-(2**31), -1, 0, 1, 2**31 - 1], np.int32))

    def f(a, b, ia, ib):
        return (
            lax.eq(a, b), lax.ne(a, b), lax.lt(a, b), lax.le(a, b), lax.gt(a, b), lax.ge(a, b),
            eq_to_p.bind(a, b), lt_to_p.bind(a, b), le_to_p.bind(a, b),
            lax.lt(ia, ib), lax.lt(ia.astype(jnp.uint32), ib.astype(jnp.uint32)),
            lax.ge(ia, ib), lax.ge(ia.astype(jnp.uint32), ib.astype(jnp.uint32)),
        )

    return f, (a, b, ia, ib)


@op_case("maximum_nan", "HLO maximum/minimum propagate NaN (either side) on f32, bf16, f16; +-inf; "
         "s32/u8 extremes. (+0/-0 ties are left out: XLA does not define which is returned.)",
         rtol=0, atol=0)
def _maximum_nan(rng):
    import jax.numpy as jnp
    from jax import lax

    vals = np.array([np.nan, -np.inf, -1.0, 0.0, 2.5, 1e-45, np.inf], np.float32)
    a, b = grid(vals, vals)
    ia, ib = grid(int_edges(np.int32), np.array([-(2**31), -1, 0, 2**31 - 1], np.int32))
    ua, ub = grid(np.array([0, 1, 128, 255], np.uint8), np.array([0, 127, 255], np.uint8))

    def f(a, b, ia, ib, ua, ub):
        ah, bh = a.astype(jnp.float16), b.astype(jnp.float16)
        ab, bb = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
        return (lax.max(a, b), lax.min(a, b), lax.max(ah, bh), lax.min(ah, bh), lax.max(ab, bb),
                lax.min(ab, bb), lax.max(ia, ib), lax.min(ia, ib), lax.max(ua, ub), lax.min(ua, ub))

    return f, (a, b, ia, ib, ua, ub)


@op_case("round_nearest_even", "round-nearest-even and round-nearest-afz on f32/f16/bf16 ties "
         "(+-0.5, 1.5, 2.5, -2.5), -0, large integers, inf/NaN; plus floor/ceil (jnp.round(x, 2) is left out: XLA rewrites its x/100 as x*0.01).", rtol=0, atol=0)
def _round(rng):
    import jax.numpy as jnp
    from jax import lax

    x = np.concatenate([F32_EDGES, np.array([0.49999997, 2.5, 3.5, -3.5, -1.5, 4.5, 8388607.5, 8388608.0,
                        -8388609.0, 16777217.0, 1e20, -0.49999997, 0.5000001], np.float32)])

    def f(x):
        r = lax.round
        E, A = lax.RoundingMethod.TO_NEAREST_EVEN, lax.RoundingMethod.AWAY_FROM_ZERO
        h, b = x.astype(jnp.float16), x.astype(jnp.bfloat16)
        return (r(x, E), r(x, A), r(h, E), r(h, A), r(b, E), r(b, A), jnp.floor(x), jnp.ceil(x))

    return f, (x,)


@op_case("sort_stable_nan", "Stable lax.sort (is_stable=true) of f32 keys with NaN, -0/+0, +-inf and "
         "many ties, carrying an index payload (tests stability); jnp.sort/argsort order NaNs last and "
         "descending sort.", rtol=0, atol=0)
def _sort_stable(rng):
    import jax.numpy as jnp
    from jax import lax

    k = np.array([1.0, np.nan, -0.0, 0.0, 1.0, -np.inf, np.inf, 0.0, -0.0, np.nan, 1.0, -1.0, 2.0, -np.inf,
                  1e-45, -1e-45, 0.0, 3.0, 1.0, -0.0], np.float32)
    k2 = ints(rng, (4, 33), 0, 3).astype(np.float32)

    def f(k, k2):
        idx = jnp.arange(k.shape[0], dtype=jnp.int32)
        s = lax.sort((k, idx), is_stable=True, num_keys=1)
        idx2 = lax.broadcasted_iota(jnp.int32, k2.shape, 1)
        s2 = lax.sort((k2, idx2), dimension=1, is_stable=True, num_keys=1)
        return s, s2, jnp.sort(k), jnp.argsort(k, stable=True), jnp.argsort(-k, stable=True), jnp.sort(k, descending=True)

    return f, (k, k2)


@op_case("gather_clamp", "HLO gather with out-of-bounds and negative start indices (XLA clamps the start so "
         "the whole slice is in bounds), windowed slices, collapsed dims, permuted "
         "start_index_map, batched gather via vmap.", rtol=0, atol=0)
def _gather_clamp(rng):
    import jax
    from jax import lax

    x = np.arange(7 * 9 * 2, dtype=np.float32).reshape(7, 9, 2)
    starts = np.array([[0, 0], [-5, 3], [6, 8], [100, -100], [3, 7], [2, 2]], np.int32)
    pts = np.array([[-1, 4], [7, 9], [2, 3]], np.int32)
    bidx = np.array([[0, 8], [-3, 4], [1, 9]], np.int32)

    def f(x, starts, pts, bidx):
        P = lax.GatherScatterMode.PROMISE_IN_BOUNDS
        dn = lax.GatherDimensionNumbers(offset_dims=(1, 2, 3), collapsed_slice_dims=(), start_index_map=(0, 1))
        a = lax.gather(x, starts, dn, (3, 4, 2), mode=P)
        dn2 = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0, 1), start_index_map=(0, 1))
        b = lax.gather(x, pts, dn2, (1, 1, 2), mode=P)
        dn3 = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(1,), start_index_map=(1, 0))
        c = lax.gather(x, pts, dn3, (2, 1, 2), mode=P)  # start_index_map permuted
        dnb = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
        d = jax.vmap(lambda row, i: lax.gather(row, i[:, None], dnb, (1,), mode=P))(x[:3, :, 0], bidx)
        return a, b, c, d

    return f, (x, starts, pts, bidx)


@op_case("dynamic_slice_clamp", "lax.dynamic_slice with start indices that are negative or too large "
         "(XLA clamps into [0, dim - size]), s32 and u32 and s8 index types.", rtol=0, atol=0)
def _dynamic_slice(rng):
    import jax.numpy as jnp
    from jax import lax

    x = np.arange(8 * 10, dtype=np.float32).reshape(8, 10)
    starts = np.array([[0, 0], [-3, 2], [7, 9], [100, -100], [5, 6], [-(2**31), 2**31 - 1]], np.int32)

    def f(x, starts):
        outs = [lax.dynamic_slice(x, (starts[i, 0], starts[i, 1]), (3, 4)) for i in range(6)]
        outs.append(lax.dynamic_slice(x, (starts[2, 0].astype(jnp.uint32), jnp.uint32(1)), (2, 10)))
        outs.append(lax.dynamic_slice(x, (starts[1, 0].astype(jnp.int8), jnp.int8(9)), (8, 1)))
        outs.append(lax.dynamic_slice(x, (starts[3, 0], starts[3, 1]), (8, 10)))
        return tuple(outs)

    return f, (x, starts)


@op_case("dynamic_update_slice_clamp", "lax.dynamic_update_slice with clamped out-of-range starts "
         "(negative, too large, INT_MIN/INT_MAX) on f32 and s32 operands.", rtol=0, atol=0)
def _dus(rng):
    from jax import lax

    x = np.zeros((6, 7), np.float32)
    u = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    xi = np.full((9,), -1, np.int32)
    ui = np.array([5, 6, 7], np.int32)
    starts = np.array([[0, 0], [-3, 2], [5, 6], [100, -100], [2, 3], [-(2**31), 2**31 - 1]], np.int32)

    def f(x, u, xi, ui, starts):
        outs = [lax.dynamic_update_slice(x, u, (starts[i, 0], starts[i, 1])) for i in range(6)]
        outs += [lax.dynamic_update_slice(xi, ui, (starts[i, 0],)) for i in (1, 2, 3, 4)]
        return tuple(outs)

    return f, (x, u, xi, ui, starts)


@op_case("scatter_duplicates", "HLO scatter: add with duplicate indices (s32 and exactly-representable "
         "f32), mul/min/max combiners, windowed updates, out-of-bounds update windows skipped "
         "(mode=promise_in_bounds/drop), update with unique indices flag.", rtol=0, atol=0)
def _scatter_dup(rng):
    import jax.numpy as jnp
    from jax import lax

    x = np.zeros((6, 5), np.float32)
    idx = np.array([[1], [4], [1], [1], [5], [0], [4]], np.int32)
    upd = ints(rng, (7, 5), -4, 5).astype(np.float32)
    xi = np.arange(10, dtype=np.int32)
    idxi = np.array([[2], [2], [9], [-1], [10], [2], [0]], np.int32)
    updi = np.array([1, 10, 100, 1000, 10000, 100000, 7], np.int32)
    widx = np.array([[0, 0], [4, 3], [-1, 0], [2, 4], [5, 5]], np.int32)
    wupd = np.ones((5, 2, 2), np.float32)

    def f(x, idx, upd, xi, idxi, updi, widx, wupd):
        P = lax.GatherScatterMode.PROMISE_IN_BOUNDS
        dn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                         scatter_dims_to_operand_dims=(0,))
        dni = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))
        dnw = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                          scatter_dims_to_operand_dims=(0, 1))
        return (
            lax.scatter_add(x, idx, upd, dn, mode=P), lax.scatter_mul(x + 1.0, idx, upd * 0 + 2.0, dn, mode=P),
            lax.scatter_min(x, idx, upd, dn, mode=P), lax.scatter_max(x, idx, upd, dn, mode=P),
            lax.scatter_add(xi, idxi, updi, dni, mode=P), lax.scatter(xi, idxi[:3] * 0 + jnp.array([[3], [9], [20]]),
                                                                      updi[:3], dni, mode=P, unique_indices=True),
            lax.scatter_add(x, widx, wupd, dnw, mode=P),
        )

    return f, (x, idx, upd, xi, idxi, updi, widx, wupd)


@op_case("reduce_precision", "HLO reduce-precision to (5,10) f16-like, (8,7) bf16-like, (4,3) and "
         "(5,2) f8-like, (2,1): rounding to nearest even, overflow to inf, underflow to zero, NaN kept.",
         rtol=0, atol=0)
def _reduce_precision(rng):
    from jax import lax

    x = np.concatenate([F32_EDGES, normal(rng, (20,), scale=1000.0), np.array([65504.0, 65520.0, 65519.0, 6e-8,
                        3e-8, 448.0, 464.0, 240.0, 248.0, 57344.0, 61440.0], np.float32)]).astype(np.float32)

    def f(x):
        return tuple(lax.reduce_precision(x, exponent_bits=e, mantissa_bits=m)
                     for e, m in ((5, 10), (8, 7), (4, 3), (5, 2), (2, 1), (8, 23)))

    return f, (x,)


def _rbg_case(alg_name):
    def build(rng):
        import jax.numpy as jnp
        from jax import lax

        alg = getattr(lax.RandomAlgorithm, alg_name)
        key = np.array([0x12345678, 0x9ABCDEF0, 42, 7], np.uint32)

        def f(key):
            k1, a = lax.rng_bit_generator(key, (7, 13), jnp.uint32, algorithm=alg)
            k2, b = lax.rng_bit_generator(k1, (5,), jnp.uint8, algorithm=alg)
            k3, c = lax.rng_bit_generator(k2, (3, 3), jnp.uint16, algorithm=alg)
            return a, b, c, k1, k2, k3

        return f, (key,)

    return build


op_case("rng_bit_generator_threefry", "lax.rng_bit_generator with RNG_THREE_FRY: u32 (7,13), u8 (5,), "
        "u16 (3,3) chained through the returned state; the u32[4] key is bitcast to u64[2].",
        rtol=0, atol=0)(_rbg_case("RNG_THREE_FRY"))
op_case("rng_bit_generator_philox", "lax.rng_bit_generator with RNG_PHILOX: u32 (7,13), u8 (5,), u16 (3,3) "
        "chained through the returned state.", rtol=0, atol=0)(_rbg_case("RNG_PHILOX"))


@op_case("clz_popcnt", "count-leading-zeros and popcnt on s32/u32/s8/u8/s16/u16 edge values.", rtol=0, atol=0)
def _clz_popcnt(rng):
    import jax.numpy as jnp
    from jax import lax

    x = np.concatenate([S32_EDGES, np.array([0x0000FFFF, 0x00800000, 0x40000000, 0x55555555, 3, 4, 8, 255], np.int32)])

    def f(x):
        outs = []
        for dt in (jnp.int32, jnp.uint32, jnp.int8, jnp.uint8, jnp.int16, jnp.uint16):
            v = x.astype(dt)
            outs += [lax.clz(v), lax.population_count(v)]
        return tuple(outs)

    return f, (x,)


@op_case("atan2_edges", "atan2(y, x) over the grid of {+-0, +-1, +-inf, NaN, denormal, 1e30} on f32, "
         "plus f16 and bf16.", rtol=2e-6, atol=1e-7)
def _atan2(rng):
    import jax.numpy as jnp
    from jax import lax

    v = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-39, -3.0, 1e30, 0.5], np.float32)
    y, x = grid(v, v)

    def f(y, x):
        return (lax.atan2(y, x), lax.atan2(y.astype(jnp.float16), x.astype(jnp.float16)),
                lax.atan2(y.astype(jnp.bfloat16), x.astype(jnp.bfloat16)))

    return f, (y, x)


@op_case("pow_edges", "HLO power on f32 over a grid incl. 0^0, 0^-1, -0^-1, (-2)^0.5 (NaN), (-2)^3, "
         "1^NaN, NaN^0, inf^-1, (-inf)^3, large exponents; also f16. (lax.pow takes float bases only.)",
         rtol=2e-6, atol=1e-30)
def _pow(rng):
    import jax.numpy as jnp
    from jax import lax

    b, e = grid(np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, np.inf, -np.inf, np.nan, 10.0, 1e-39], np.float32),
                np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -3.0, np.inf, -np.inf, np.nan, 40.0, -50.5], np.float32))
    def f(b, e):
        return lax.pow(b, e), lax.pow(b.astype(jnp.float16), e.astype(jnp.float16))

    return f, (b, e)


@op_case("integer_pow", "lax.integer_pow (lowered to multiply chains, divide for negative powers) "
         "for n in {0, 1, 2, 3, 5, -1, -2, 7} on f32 and s32 (with overflow).", rtol=1e-6, atol=0)
def _integer_pow(rng):
    from jax import lax

    x = np.concatenate([F32_EDGES, normal(rng, (10,), scale=3.0)]).astype(np.float32)
    xi = np.array([0, 1, -1, 2, -3, 7, 100, 46341, -46341, 1000, 2**31 - 1], np.int32)

    def f(x, xi):
        return tuple(lax.integer_pow(x, n) for n in (0, 1, 2, 3, 5, -1, -2, 7)) + tuple(
            lax.integer_pow(xi, n) for n in (0, 2, 3, 7))

    return f, (x, xi)


@op_case("sign_edges", "HLO sign on f32 (NaN, +-0, +-inf, denormals), s32 (INT_MIN), f16, bf16, c64.",
         rtol=1e-6, atol=1e-7)
def _sign(rng):
    import jax.numpy as jnp
    from jax import lax

    x = F32_EDGES.copy()
    xi = S32_EDGES.copy()
    z = np.array([3 + 4j, -1j, 0j, 1e-30 + 0j, -2 - 2j], np.complex64)

    def f(x, xi, z):
        return lax.sign(x), lax.sign(xi), lax.sign(x.astype(jnp.float16)), lax.sign(x.astype(jnp.bfloat16)), lax.sign(z)

    return f, (x, xi, z)


@op_case("is_finite", "HLO is-finite on f32/f16/bf16/f64-free edge values (NaN, +-inf, FLT_MAX, "
         "denormals).", rtol=0, atol=0)
def _is_finite(rng):
    import jax.numpy as jnp
    from jax import lax

    x = F32_EDGES.copy()

    def f(x):
        return (lax.is_finite(x), lax.is_finite(x.astype(jnp.float16)), lax.is_finite(x.astype(jnp.bfloat16)),
                jnp.isnan(x), jnp.isinf(x))

    return f, (x,)


@op_case("select_and_scatter", "HLO select-and-scatter (max-pool gradient): overlapping 3x3/2 windows "
         "with ties (first max selected), SAME padding, 1-D and min-select (ge/le), plus jax.grad of "
         "reduce_window max.", rtol=0, atol=0)
def _select_and_scatter(rng):
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax._src.lax.windowed_reductions import _select_and_scatter_add

    x = ints(rng, (2, 7, 9, 2), 0, 4).astype(np.float32)  # ties
    src = ints(rng, (2, 4, 5, 2), 1, 9).astype(np.float32)
    src_v = ints(rng, (2, 3, 4, 2), 1, 9).astype(np.float32)
    x1 = np.array([1.0, 3.0, 3.0, 2.0, 5.0, 5.0, 5.0, 0.0, -1.0, 4.0, 4.0], np.float32)
    s1 = np.array([1.0, 10.0, 100.0, 1000.0, 10000.0], np.float32)

    def f(x, src, src_v, x1, s1):
        pad = lax.padtype_to_pads(x.shape, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        a = _select_and_scatter_add(src, x, lax.ge_p, (1, 3, 3, 1), (1, 2, 2, 1), pad)
        b = _select_and_scatter_add(src_v, x, lax.ge_p, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0),) * 4)
        c = _select_and_scatter_add(s1, x1, lax.ge_p, (3,), (2,), ((0, 0),))
        d = _select_and_scatter_add(s1, x1, lax.le_p, (3,), (2,), ((0, 0),))
        g = jax.grad(lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME").sum())(x)
        return a, b, c, d, g

    return f, (x, src, src_v, x1, s1)


@op_case("reduce_window_padding", "HLO reduce-window with low/high padding (init value fills the "
         "pad), base dilation, window dilation, strides; add/max/min, s32, and a variadic "
         "(2-operand) reduce-window.", rtol=1e-6, atol=1e-6)
def _reduce_window(rng):
    import jax.numpy as jnp
    from jax import lax

    x = ints(rng, (6, 9), -9, 10).astype(np.float32)
    xi = ints(rng, (5, 7), -50, 50)

    def f(x, xi):
        rw = lax.reduce_window
        return (
            rw(x, 0.0, lax.add, (2, 3), (1, 2), ((1, 2), (0, 3))),
            rw(x, -jnp.inf, lax.max, (3, 3), (2, 2), ((1, 1), (2, 0)), window_dilation=(1, 2)),
            rw(x, jnp.inf, lax.min, (2, 2), (1, 1), ((0, 0), (1, 1)), base_dilation=(2, 1)),
            rw(x, 1.0, lax.mul, (1, 4), (1, 3), "SAME"),
            rw(xi, 0, lax.add, (3, 2), (2, 1), ((2, 0), (0, 1)), base_dilation=(1, 2), window_dilation=(2, 1)),
            rw((x, -x), (-jnp.inf, -jnp.inf), lambda a, b: (lax.max(a[0], b[0]), lax.max(a[1], b[1])),
               (2, 2), (2, 2), "VALID"),
        )

    return f, (x, xi)


@op_case("conv_padding_dilation", "HLO convolution: negative padding, asymmetric padding, lhs + rhs "
         "dilation together, strides, NCHW/OIHW and NHWC/HWIO layouts, 1x1 conv, f16, and bf16 with f32 "
         "accumulation via preferred_element_type (small-integer data: exact sums).", rtol=1e-5, atol=1e-5)
def _conv_pad(rng):
    import jax.numpy as jnp
    from jax import lax

    x = ints(rng, (2, 3, 9, 8), -3, 4).astype(np.float32)  # NCHW; small ints -> exact sums
    w = ints(rng, (4, 3, 3, 2), -2, 3).astype(np.float32)  # OIHW
    w1 = ints(rng, (5, 3, 1, 1), -2, 3).astype(np.float32)

    def f(x, w, w1):
        dn = ("NCHW", "OIHW", "NCHW")
        c = partial(lax.conv_general_dilated, dimension_numbers=dn)
        return (
            c(x, w, (1, 1), ((-1, 2), (1, -1))),
            c(x, w, (2, 1), ((3, 0), (0, 2)), lhs_dilation=(2, 3), rhs_dilation=(2, 2)),
            c(x, w, (3, 2), "SAME"),
            c(x, w1, (1, 1), "VALID"),
            lax.conv_general_dilated(jnp.transpose(x, (0, 2, 3, 1)), jnp.transpose(w, (2, 3, 1, 0)), (1, 2),
                                     ((1, 1), (2, 2)), dimension_numbers=("NHWC", "HWIO", "NHWC")),
            c(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), (1, 1), "VALID", preferred_element_type=jnp.float32),
            c(x.astype(jnp.float16), w.astype(jnp.float16), (1, 1), ((1, 1), (0, 0))),
        )

    return f, (x, w, w1)


@op_case("dot_batch", "HLO dot: batch dims at non-leading positions, multiple contracting dims, "
         "matrix-vector, vector-vector, s8 x s8 -> s32 and bf16 x bf16 -> f32 via preferred_element_type, "
         "f16 dot, s32 dot with overflow, precision=HIGHEST.", rtol=1e-5, atol=1e-5)
def _dot_batch(rng):
    import jax.numpy as jnp
    from jax import lax

    a = normal(rng, (3, 4, 5, 6))
    b = normal(rng, (5, 6, 3, 7))
    m = normal(rng, (9, 11))
    v = normal(rng, (11,))
    i8a = ints(rng, (5, 40), -128, 128, np.int8)
    i8b = ints(rng, (40, 3), -128, 128, np.int8)
    si = np.array([[2**30, 2**30], [3, -4]], np.int32)

    def f(a, b, m, v, i8a, i8b, si):
        dg = lax.dot_general
        return (
            dg(a, b, (((2, 3), (0, 1)), ((0,), (2,)))),
            dg(a, b, (((3,), (1,)), ((0, 2), (2, 0)))),
            m @ v, v @ v, jnp.einsum("ij,j->i", m, v, precision=lax.Precision.HIGHEST),
            dg(i8a, i8b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32),
            dg(m.astype(jnp.bfloat16), m.T.astype(jnp.bfloat16), (((1,), (0,)), ((), ())),
               preferred_element_type=jnp.float32),
            (m.astype(jnp.float16) @ m.T.astype(jnp.float16)),
            si @ si,
        )

    return f, (a, b, m, v, i8a, i8b, si)


@op_case("empty_shapes", "Zero-size dimensions: reductions over empty axes (sum=0, max=-inf, "
         "min=inf, prod=1), dot with K=0, concatenate with an empty operand, reshape/transpose/pad/"
         "broadcast/slice of empty arrays, empty gather and scatter, sort of an empty array.",
         rtol=0, atol=0)
def _empty(rng):
    import jax.numpy as jnp
    from jax import lax

    e = np.zeros((3, 0), np.float32)
    e2 = np.zeros((0, 4), np.float32)
    x = normal(rng, (3, 4))
    ei = np.zeros((0,), np.int32)

    def f(e, e2, x, ei):
        return (
            e.sum(1), lax.reduce(e, np.float32(-np.inf), lax.max, (1,)),
            lax.reduce(e, np.float32(np.inf), lax.min, (1,)), e.prod(1), e @ e2, jnp.concatenate([e, x], 1), e.T.reshape(0, 3, 1),
            lax.pad(e, np.float32(2.0), [(1, 0, 0), (1, 2, 0)]), jnp.broadcast_to(e2[:, None, :], (0, 5, 4)),
            x[:, 2:2], x[ei], x.at[ei].add(1.0), jnp.sort(e2, axis=0), e2.sum(0), jnp.cumsum(e, 1), ei + 1,
        )

    return f, (e, e2, x, ei)


@op_case("iota_dtypes", "HLO iota in s32/u8/s8 (wrapping past 127)/s16/u32/f32/f16/bf16 and "
         "multi-dimensional broadcasted iotas along each dimension.", rtol=0, atol=0)
def _iota(rng):
    import jax.numpy as jnp
    from jax import lax

    dummy = np.zeros((1,), np.float32)

    def f(dummy):
        return (
            lax.iota(jnp.int32, 11), lax.iota(jnp.uint8, 300), lax.iota(jnp.int8, 300), lax.iota(jnp.int16, 7),
            lax.iota(jnp.uint32, 5), lax.iota(jnp.float32, 17), lax.iota(jnp.float16, 2100),
            lax.iota(jnp.bfloat16, 300), lax.broadcasted_iota(jnp.int32, (2, 3, 4), 0),
            lax.broadcasted_iota(jnp.int32, (2, 3, 4), 1), lax.broadcasted_iota(jnp.float32, (2, 3, 4), 2),
            dummy + 1.0,
        )

    return f, (dummy,)


@op_case("exp_log_edges", "exponential, log, exponential-minus-one, log-plus-one (f32, f16, bf16) on edge "
         "values: +-0, +-inf, NaN, overflow/underflow thresholds, values near 0 and near -1.",
         rtol=2e-6, atol=1e-30)
def _exp_log(rng):
    import jax.numpy as jnp

    x = np.concatenate([F32_EDGES, np.array([88.72283, 88.72284, -87.33654, -103.97208, -103.97209, 1e-8, -1e-8,
                        -0.9999999, -1.0000001, 0.693147, 1e-4, -1e-4, 20.0, -20.0, 1e-20], np.float32),
                        uniform(rng, (16,), -5, 5)]).astype(np.float32)

    def f(x):
        h, b = x.astype(jnp.float16), x.astype(jnp.bfloat16)
        return (jnp.exp(x), jnp.log(x), jnp.expm1(x), jnp.log1p(x), jnp.exp(h), jnp.log(h), jnp.expm1(h),
                jnp.log1p(h), jnp.exp(b), jnp.log(b))

    return f, (x,)


@op_case("tanh_erf", "tanh, logistic, erf, erfc, erf_inv on f32 over [-10, 10] plus edge values; "
         "tanh and logistic on f16/bf16.", rtol=5e-6, atol=1e-7)
def _tanh_erf(rng):
    import jax.numpy as jnp
    from jax import lax

    x = np.concatenate([F32_EDGES, np.linspace(-10, 10, 41, dtype=np.float32), np.array([1e-4, -1e-4, 9.0, 9.1, 4e-3], np.float32)])
    u = np.concatenate([np.array([-1.0, 1.0, 0.0, -0.0, 0.999999, -0.999999, np.nan, 2.0], np.float32),
                        np.linspace(-0.99, 0.99, 23, dtype=np.float32)])

    def f(x, u):
        return (jnp.tanh(x), lax.logistic(x), lax.erf(x), lax.erfc(x), lax.erf_inv(u),
                jnp.tanh(x.astype(jnp.float16)), lax.logistic(x.astype(jnp.bfloat16)))

    return f, (x, u)


@op_case("trig_edges", "sine, cosine, tan, atan2-based inverse trig, sqrt, rsqrt, cbrt on f32 incl. "
         "large arguments (1e4..1e30, argument reduction), +-0, +-inf, NaN, denormals.", rtol=2e-6, atol=1e-6)
def _trig(rng):
    import jax.numpy as jnp
    from jax import lax

    x = np.concatenate([F32_EDGES, np.array([1e4, -1e4, 1e6, 1e10, 1e20, np.pi / 2, 3 * np.pi / 2, 1e-20, 4.0, 8.0, 27.0, -8.0], np.float32),
                        uniform(rng, (16,), -10, 10)]).astype(np.float32)

    def f(x):
        return (jnp.sin(x), jnp.cos(x), jnp.tan(x), jnp.sqrt(x), lax.rsqrt(x), lax.cbrt(x),
                jnp.sin(x.astype(jnp.float16)), jnp.cos(x.astype(jnp.bfloat16)))

    return f, (x,)


@op_case("abs_negate_int", "abs and negate of INT_MIN (wraps to INT_MIN), unsigned negate wrap, "
         "saturating-free add/sub/mul overflow on s32/u32/s16/u16/s8.", rtol=0, atol=0)
def _abs_neg(rng):
    import jax.numpy as jnp

    x = S32_EDGES.copy()

    def f(x):
        outs = []
        for dt in (jnp.int32, jnp.uint32, jnp.int16, jnp.uint16, jnp.int8):
            v = x.astype(dt)
            outs += [jnp.abs(v), -v, v + v, v * v, v - v[::-1]]
        return tuple(outs)

    return f, (x,)


@op_case("bitcast_convert", "HLO bitcast-convert between same-width types (f32<->s32/u32, f16<->s16, "
         "bf16<->u16) and across widths (f32 -> u8[...,4], u16[...,2] -> f32, f64-free), NaN payloads kept.",
         rtol=0, atol=0)
def _bitcast(rng):
    import jax.numpy as jnp
    from jax import lax

    x = F32_EDGES.copy()
    bits = np.array([0x7FC00001, 0xFFC00000, 0x7F800001, 0x00000001, 0x80000000, 0x3F800000], np.uint32)
    u16 = ints(rng, (5, 2), 0, 65536, np.uint16)

    def f(x, bits, u16):
        bc = lax.bitcast_convert_type
        return (bc(x, jnp.int32), bc(bits, jnp.float32), bc(bc(bits, jnp.float32), jnp.uint32),
                bc(x.astype(jnp.float16), jnp.int16), bc(u16, jnp.bfloat16), bc(x, jnp.uint8), bc(u16, jnp.float32),
                bc(bc(x, jnp.uint8), jnp.int32))

    return f, (x, bits, u16)


@op_case("clamp_select", "HLO clamp with scalar and array bounds, NaN operand and NaN bounds, "
         "min > max; select with pred arrays and broadcast scalar predicate.", rtol=0, atol=0)
def _clamp(rng):
    from jax import lax

    x = F32_EDGES.copy()
    lo = np.full_like(x, -1.0)
    hi = np.full_like(x, 2.0)
    lo[3] = np.nan
    hi[5] = np.nan
    xi = S32_EDGES.copy()
    p = np.arange(x.size) % 3 == 0

    def f(x, lo, hi, xi, p):
        return (lax.clamp(np.float32(-1.0), x, np.float32(2.0)), lax.clamp(lo, x, hi),
                lax.clamp(np.float32(3.0), x, np.float32(1.0)), lax.clamp(-5, xi, 1000), lax.select(p, x, -x),
                lax.select(x.sum() > 0, x, lo))

    return f, (x, lo, hi, xi, p)


@op_case("argmax_ties_nan", "Variadic reduce (jnp.argmax/argmin): ties pick the first index, NaN wins, "
         "+-0, +-inf, along both axes and over a flattened array; s32 and u8.", rtol=0, atol=0)
def _argmax(rng):
    import jax.numpy as jnp

    x = np.array([[1.0, 3.0, 3.0, -1.0], [np.nan, 2.0, np.nan, 5.0], [-np.inf, -np.inf, -np.inf, -np.inf],
                  [0.0, -0.0, -0.0, 0.0], [np.inf, 1.0, np.inf, np.nan], [-1.0, -3.0, -3.0, -1.0]], np.float32)
    xi = np.array([[5, 5, 1, -7], [0, 0, 0, 0], [-(2**31), 2**31 - 1, 3, 2**31 - 1]], np.int32)

    def f(x, xi):
        return (jnp.argmax(x, 1), jnp.argmin(x, 1), jnp.argmax(x, 0), jnp.argmin(x, 0), jnp.argmax(x), jnp.argmin(x),
                jnp.argmax(xi, 1), jnp.argmin(xi, 1), jnp.argmax(xi.astype(jnp.uint8), 0))

    return f, (x, xi)


@op_case("pad_slice_reverse", "HLO pad (negative low/high, interior, all dims), slice with strides "
         "and start=limit, reverse of every dim subset, concatenate of 4 operands; s8/pred operands.",
         rtol=0, atol=0)
def _pad_slice(rng):
    import jax.numpy as jnp
    from jax import lax

    x = np.arange(4 * 5 * 3, dtype=np.int8).reshape(4, 5, 3)
    p = (np.arange(12) % 5 == 0).reshape(3, 4)

    def f(x, p):
        return (
            lax.pad(x, np.int8(-1), [(1, -2, 2), (-1, -1, 1), (0, 2, 0)]),
            lax.pad(p, np.bool_(True), [(2, 1, 1), (0, -2, 3)]),
            lax.slice(x, (1, 4, 0), (4, 5, 3), (2, 1, 2)), lax.slice(x, (2, 0, 0), (2, 5, 3)),
            lax.rev(x, (0,)), lax.rev(x, (1, 2)), lax.rev(x, (0, 1, 2)),
            jnp.concatenate([x, x[:, :1], x[:, 2:4], jnp.zeros((4, 0, 3), jnp.int8)], 1),
        )

    return f, (x, p)


@op_case("transpose_reshape", "transpose with every permutation of a rank-4 array of odd sizes and "
         "reshape to/from rank 1, 5 (row-major element order).", rtol=0, atol=0)
def _transpose(rng):
    import itertools

    import jax.numpy as jnp

    x = np.arange(2 * 3 * 5 * 7, dtype=np.int32).reshape(2, 3, 5, 7)

    def f(x):
        outs = [jnp.transpose(x, perm) for perm in itertools.permutations(range(4))][::3]
        return tuple(outs) + (x.reshape(-1), x.reshape(7, 1, 5, 3, 2), x.reshape(6, 35).T.reshape(5, 7, 6))

    return f, (x,)


@op_case("fft_types", "HLO fft of every fft_type: FFT, IFFT, RFFT, IRFFT (odd and even lengths), "
         "1-D, 2-D and 3-D lengths, c64.", rtol=1e-4, atol=1e-4)
def _fft_types(rng):
    from jax import lax

    z = (normal(rng, (3, 5, 6, 7)) + 1j * normal(rng, (3, 5, 6, 7))).astype(np.complex64)
    r = normal(rng, (4, 15))
    r2 = normal(rng, (2, 6, 8))

    def f(z, r, r2):
        F = lax.FftType
        rf = lax.fft(r, F.RFFT, (15,))
        rf2 = lax.fft(r2, F.RFFT, (6, 8))
        return (lax.fft(z, F.FFT, (7,)), lax.fft(z, F.IFFT, (6, 7)), lax.fft(z, F.FFT, (5, 6, 7)), rf,
                lax.fft(rf, F.IRFFT, (15,)), lax.fft(rf2, F.IRFFT, (6, 8)), lax.fft(rf[:, :7], F.IRFFT, (12,)))

    return f, (z, r, r2)


@op_case("complex_edges", "c64 ops with zeros, infinities and NaN components: multiply, divide "
         "(incl. by 0), abs (overflow-safe hypot), sqrt, exp, log, sign.", rtol=1e-5, atol=1e-6)
def _complex_edges(rng):
    import jax.numpy as jnp

    re = np.array([0.0, -0.0, 1.0, -1.0, 1e30, 3e38, np.inf, -np.inf, np.nan, 1e-30, 2.0, 0.5], np.float32)
    im = np.array([0.0, 1.0, -0.0, 1e30, -1.0, 3e38, 1.0, np.nan, 0.0, 1e-30, -2.0, np.inf], np.float32)
    a = (re + 1j * im).astype(np.complex64)
    b = (im[::-1] + 1j * re).astype(np.complex64)

    def f(a, b):
        return (a * b, a / b, jnp.abs(a), jnp.sqrt(a), jnp.exp(a), jnp.log(a), a + b, a - b, -a, jnp.real(a * 2.0))

    return f, (a, b)


@op_case("reduce_variadic", "Variadic reduce with 3 operands and mixed dtypes (f32 max + index + "
         "count), reduce over multiple non-contiguous dims, pred and/or reductions, s8/u16 sums with "
         "overflow, reduction to scalar with non-zero init.", rtol=1e-6, atol=1e-6)
def _reduce_variadic(rng):
    import jax.numpy as jnp
    from jax import lax

    x = ints(rng, (4, 5, 6), -20, 20).astype(np.float32)
    b = rng.random((4, 5, 6)) > 0.2
    i8 = ints(rng, (4, 5, 6), 60, 128, np.int8)

    def f(x, b, i8):
        idx = lax.broadcasted_iota(jnp.int32, x.shape, 2)
        cnt = jnp.ones(x.shape, jnp.int32)

        def comb(a, c):
            (av, ai, an), (cv, ci, cn) = a, c
            take = (cv > av) | ((cv == av) & (ci < ai))
            return lax.select(take, cv, av), lax.select(take, ci, ai), an + cn

        r = lax.reduce((x, idx, cnt), (np.float32(-np.inf), np.int32(0), np.int32(0)), comb, (0, 2))
        return (r, lax.reduce(x, np.float32(100.0), lax.add, (0, 1, 2)), b.all((0, 2)), b.any(1),
                lax.reduce(i8, np.int8(0), lax.add, (1,)), lax.reduce(i8.astype(jnp.uint16) * 600, np.uint16(0), lax.add, (2,)))

    return f, (x, b, i8)


@op_case("while_nested", "Nested while loops (fori inside fori and while with a data-dependent "
         "condition inside), loop-carried tuples of mixed dtypes, conditional inside the loop body.",
         rtol=1e-6, atol=1e-6)
def _while_nested(rng):
    import jax.numpy as jnp
    from jax import lax

    x = normal(rng, (4, 3))
    n = np.array(5, np.int32)

    def f(x, n):
        def outer(i, c):
            acc, cnt = c

            def inner(j, a):
                return lax.cond(j % 2 == 0, lambda v: v * 1.01 + 0.1, lambda v: v - 0.05, a)

            acc = lax.fori_loop(0, i + 1, inner, acc)
            k = lax.while_loop(lambda k: k * k < i * 7, lambda k: k + 1, jnp.int32(0))
            return acc, cnt + k

        return lax.fori_loop(0, n, outer, (x, jnp.int32(0)))

    return f, (x, n)


@op_case("optimization_barrier", "HLO opt-barrier via lax.optimization_barrier on a tuple of mixed "
         "dtypes, plus a computation around it.", rtol=1e-6, atol=1e-6)
def _opt_barrier(rng):
    from jax import lax

    x = normal(rng, (5, 3))
    i = np.arange(4, dtype=np.int32)

    def f(x, i):
        a, b = lax.optimization_barrier((x * 2.0, i + 1))
        return a.sum(0), b * 3

    return f, (x, i)


@op_case("cumulative_ops", "cumsum/cumprod/cummax/cummin/cumlogsumexp in both directions on f32, s32, "
         "u8 (lowered via reduce-window on CPU).", rtol=1e-5, atol=1e-5)
def _cumulative(rng):
    from jax import lax

    x = ints(rng, (5, 11), -4, 5).astype(np.float32)
    xi = ints(rng, (5, 11), -100, 100)
    xu = ints(rng, (13,), 0, 256, np.uint8)

    def f(x, xi, xu):
        return (lax.cumsum(x, 1), lax.cumsum(x, 0, reverse=True), lax.cumprod(x * 0.5, 1), lax.cummax(x, 1),
                lax.cummin(x, 0, reverse=True), lax.cumlogsumexp(x, 1), lax.cumsum(xi, 1), lax.cummax(xi, 0),
                lax.cumsum(xu, 0), lax.cumprod(xu, 0))

    return f, (x, xi, xu)


@op_case("top_k_edges", "HLO topk (lax.top_k): ties (lower index first), NaN ordering, +-inf, -0/+0, "
         "k equal to the row length, k=1, s32 and bf16.", rtol=0, atol=0)
def _top_k_edges(rng):
    import jax.numpy as jnp
    from jax import lax

    x = np.array([[3.0, 1.0, 3.0, np.nan, -np.inf, 0.0, -0.0, np.inf, 3.0, 2.0],
                  [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]], np.float32)
    xi = np.array([[5, -(2**31), 2**31 - 1, 5, 0, -1]], np.int32)

    def f(x, xi):
        return (lax.top_k(x, 4), lax.top_k(x, 10), lax.top_k(x, 1), lax.top_k(xi, 6),
                lax.top_k(x.astype(jnp.bfloat16), 3))

    return f, (x, xi)


@op_case("constants", "Constants embedded in the module (closed-over numpy arrays): f32 (40,30), "
         "bf16, f16, s8, u16, pred, c64, scalars incl. NaN/-inf/-0; large constants may print as {...} "
         "in the .hlo text, the .pb always holds the full literal.", rtol=0, atol=0)
def _constants(rng):
    import jax.numpy as jnp
    from ml_dtypes import bfloat16

    big = normal(rng, (40, 30))
    cbf = normal(rng, (17,)).astype(bfloat16)
    cf16 = np.array([65504.0, -0.0, 6e-8, np.inf, 1.5], np.float16)
    cs8 = np.array([-128, 127, 0, -1], np.int8)
    cu16 = np.array([[0, 65535], [1, 300]], np.uint16)
    cpred = np.array([True, False, True])
    cc = np.array([1 + 2j, -0.5j, np.nan + 0j], np.complex64)
    x = normal(rng, (40, 30))

    def f(x):
        return (x * big, jnp.float32(np.nan) + x[0, :3], jnp.float32(-np.inf) * x[1, :2], x[2, :4] * -0.0,
                cbf * x[0, 0].astype(jnp.bfloat16), cf16 + x[0, 1].astype(jnp.float16),
                cs8 + (x[0, 2] > 0).astype(jnp.int8), cu16 * (x[0, 3] > 0).astype(jnp.uint16) + 1,
                cpred ^ (x[0, :3] > 0), cc * x[0, 4], big[::7, ::9] + x[:6, :4])

    return f, (x,)


@op_case("bitwise_ops", "and/or/xor/not on s32, u8, s16 and pred, pred -> s32/f32 converts. Each "
         "integer width is its own parameter: and/or of two narrowing converts (s32->s16/s8) crashes "
         "XLA:CPU's compiler in jaxlib 0.10.2, so that pattern is avoided.", rtol=0, atol=0)
def _bitwise(rng):
    import jax.numpy as jnp

    a = ints(rng, (24,), -(2**31), 2**31 - 1)
    b = np.concatenate([S32_EDGES, ints(rng, (11,), -(2**31), 2**31 - 1)])
    a8, b8 = ints(rng, (24,), 0, 256, np.uint8), ints(rng, (24,), 0, 256, np.uint8)
    a16, b16 = a.astype(np.int16), b.astype(np.int16)
    p = rng.random(24) > 0.5
    q = rng.random(24) > 0.5

    def f(a, b, a8, b8, a16, b16, p, q):
        outs = []
        for x, y in ((a, b), (a8, b8), (a16, b16)):
            outs += [x & y, x | y, x ^ y, ~x]
        return tuple(outs) + (p & q, p | q, p ^ q, ~p, p.astype(jnp.int32), q.astype(jnp.float32))

    return f, (a, b, a8, b8, a16, b16, p, q)


@op_case("narrow_contraction_converts", "bf16 / f8 / f16 dots and convolutions whose result is "
         "converted to a wider type: XLA CPU reads a bf16 contraction converted to f32, and an f8 "
         "one converted to f16, unrounded (its float normalization's convert folding); an f16 "
         "contraction, or an f8 one converted to f32, rounds to its own type first. The tolerance admits an f8 rounding "
         "(the sums run in another order than XLA's, and the unoptimized module, which the "
         "interpreter also checks, rounds every narrow result); tests/test_pass_float_norm.py "
         "checks the folding itself against these outputs closely.", rtol=0.13, atol=1e-3)
def _narrow_contraction_converts(rng):
    import jax.numpy as jnp
    from jax import lax

    a = normal(rng, (16, 24), scale=4.0)
    b = normal(rng, (24, 12))
    x = normal(rng, (2, 9, 9, 3), scale=2.0)
    w = normal(rng, (3, 3, 3, 4))

    def conv(x, w, t):
        return lax.conv_general_dilated(x.astype(t), w.astype(t), (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def f(a, b, x, w):
        bf, f8, h = jnp.bfloat16, jnp.float8_e4m3fn, jnp.float16
        dot = lambda t: a.astype(t) @ b.astype(t)  # noqa: E731
        return ((dot(bf)).astype(jnp.float32), dot(bf).astype(h), dot(bf),
                dot(f8).astype(h), dot(f8).astype(jnp.float32), dot(h).astype(jnp.float32),
                conv(x, w, bf).astype(jnp.float32), conv(x, w, f8).astype(h),
                conv(x, w, h).astype(jnp.float32))

    return f, (a, b, x, w)


@op_case("linalg_svd_eig_tridiagonal", "jax's other LAPACK calls on CPU: gesdd (singular "
         "values alone, thin and full vectors, batched, f32 and a rank-deficient matrix), geev "
         "(a non-symmetric matrix with a complex pair; vectors up to a phase, LAPACK's choice) and "
         "gtsv (batched tridiagonal solve with a row interchange).", rtol=2e-4, atol=2e-5)
def _linalg_svd_eig_tridiagonal(rng):
    import jax.numpy as jnp
    from jax import lax

    a = normal(rng, (3, 7, 4))
    low_rank = (normal(rng, (6, 2)) @ normal(rng, (2, 5))).astype(np.float32)
    g = np.array([[2.0, -1.0, 0.5, 0.0], [1.0, 2.0, 0.0, 0.3], [0.0, 0.4, 3.0, 1.0],
                  [0.2, 0.0, -1.0, 1.5]], np.float32)
    d = normal(rng, (2, 8)) + 3.0
    d[0, 2] = 0.01  # smaller than its subdiagonal neighbour: gtsv swaps the rows
    dl, du = normal(rng, (2, 8)), normal(rng, (2, 8))
    dl[:, 0] = 0.0
    du[:, -1] = 0.0
    b = normal(rng, (2, 8, 3))

    def f(a, low_rank, g, dl, d, du, b):
        u, s, vt = jnp.linalg.svd(a, full_matrices=False)
        uf, sf, vtf = jnp.linalg.svd(low_rank, full_matrices=True)
        w, v = jnp.linalg.eig(g)
        return (s, jnp.abs(u), jnp.abs(vt), (u * s[..., None, :]) @ vt,
                sf, jnp.abs(uf[:, :2]), jnp.abs(vtf[:2]), jnp.linalg.svd(a, compute_uv=False),
                w, jnp.abs(v), v * jnp.conj(v[:1]), lax.linalg.tridiagonal_solve(dl, d, du, b))

    return f, (a, low_rank, g, dl, d, du, b)


@op_case("long_scans", "scans longer than XLA CPU's reduce-window base length (16), which XLA "
         "evaluates as scans of 16 plus a scan of their totals: cumsum of 5141 f32 (the order "
         "shows in the rounding), a reverse cumsum down the columns, an exclusive scan "
         "(lax.reduce_window with a padding of n), cumprod near 1, cummax/cummin with NaN, "
         "cumlogsumexp (a reducer that is not one op) and an s32 cumsum. The tolerance admits "
         "a left-to-right sum (the unoptimized module); tests/test_xla_numerics.py checks that "
         "compiled modules match these outputs bit for bit.", rtol=2e-4, atol=2e-4)
def _long_scans(rng):
    import jax.numpy as jnp
    from jax import lax

    x = normal(rng, (5141,))
    cols = normal(rng, (300, 5))
    near_one = (1.0 + normal(rng, (3, 700), scale=1e-3)).astype(np.float32)
    extremes = normal(rng, (2, 100))
    extremes[0, 40] = np.nan
    small = normal(rng, (4, 257))
    xi = ints(rng, (1000,), -(1 << 20), 1 << 20)

    def exclusive_sum(v):
        n = v.shape[0]
        return lax.reduce_window(v, np.float32(0), lax.add, (n,), (1,), [(n, 0)])

    def f(x, cols, near_one, extremes, small, xi):
        return (jnp.cumsum(x), lax.cumsum(cols, 0, reverse=True), exclusive_sum(x[:999]),
                jnp.cumprod(near_one, axis=1), lax.cummax(extremes, 1),
                lax.cummin(extremes, 1, reverse=True), lax.cumlogsumexp(small, 1),
                jnp.cumsum(xi))

    return f, (x, cols, near_one, extremes, small, xi)


@op_case("sum_order", "float sums whose rounding shows XLA CPU's order: f16 and bf16 scans, "
         "pooling windows and reductions (every step rounds to the narrow type; reductions "
         "longer than 32 sum windows of 32 first), f32 sums of fewer than 4096 elements (XLA's "
         "tree of 32s; larger ones go to its reduction library), products, and means (XLA "
         "multiplies by 1/n; the product's factors need no rounding, so XLA's fused multiply-add "
         "gives the same ones). The tolerance admits the unoptimized module's left-to-right "
         "order (bf16 partial sums of 300 drift by several of their ulps); tests/test_xla_numerics.py "
         "checks that compiled modules match bit for bit.", rtol=0.1, atol=0.1)
def _sum_order(rng):
    import jax.numpy as jnp
    from jax import lax
    from ml_dtypes import bfloat16

    h = normal(rng, (300,), np.float16)
    b = normal(rng, (300,), bfloat16)
    h2 = normal(rng, (8, 300), np.float16)
    b2 = normal(rng, (8, 300), bfloat16)
    x = normal(rng, (8, 300))
    c = normal(rng, (10, 20, 15))
    v = normal(rng, (1000,))

    def f(h, b, h2, b2, x, c, v):
        def pool(a):
            return lax.reduce_window(a, np.array(0, a.dtype), lax.add, (8,), (1,), "VALID")

        def total(a, axes):
            return lax.reduce(a, np.array(0, a.dtype), lax.add, axes)

        return (jnp.cumsum(h), jnp.cumsum(b[:64]), pool(h), pool(b), total(h[:40], (0,)),
                total(b, (0,)), total(h2, (1,)), total(h2, (0,)), total(b2, (1,)),
                lax.reduce_window(h2, np.float16(0), lax.add, (3, 3), (1, 1), "VALID"),
                x.sum(1), x.sum(0), v.sum(), c.sum((0, 2)), c.mean(1), x.mean(),
                jnp.prod(1.0 + v / 1024), v.max())

    return f, (h, b, h2, b2, x, c, v)


@op_case("divide_order", "divisions by a broadcast, which XLA CPU computes as a multiply by the "
         "broadcast reciprocal: per-row and per-column scales (f32, f16), softmax, L2 "
         "normalization, and an int8 quantization's x / scale before its rounding (a last-bit "
         "difference there moves a value across a half). tests/test_xla_numerics.py checks "
         "that compiled modules match bit for bit.", rtol=1e-5, atol=1e-5)
def _divide_order(rng):
    import jax
    import jax.numpy as jnp

    x = normal(rng, (16, 200), scale=3.0)
    y = uniform(rng, (16,), 0.5, 4.0)
    z = uniform(rng, (200,), 0.5, 4.0)
    h = normal(rng, (16, 200), np.float16)
    hy = uniform(rng, (16,), 0.5, 4.0, np.float16)
    q = (rng.integers(-1000, 1000, (32, 256)) / 256.0).astype(np.float32)

    def f(x, y, z, h, hy, q):
        scale = jnp.max(jnp.abs(q), 1, keepdims=True) / 127.0
        return (x / y[:, None], x / z[None, :], h / hy[:, None], jax.nn.softmax(x, axis=-1),
                x / jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True)), q / scale)

    return f, (x, y, z, h, hy, q)


@op_case("fma_contraction", "multiply-adds, which XLA CPU's LLVM fuses into FMAs where the "
         "processor has them (AllowFPOpFusion=Fast): x*y + z, z - x*y, x*y - z, two products "
         "added, a broadcast scale, Horner's rule, f64, and a product read by two outputs (XLA "
         "fuses a copy of it into each) are fused; f16 (computed in f32, rounded per op) is not. tests/test_xla_numerics.py checks "
         "that compiled modules match bit for bit.", rtol=1e-5, atol=1e-5, x64=True)
def _fma_contraction(rng):
    x, y, z, u = (normal(rng, (64, 96)) for _ in range(4))
    a = np.asarray(normal(rng, ()), np.float32)
    d = normal(rng, (64, 96), np.float64)
    h, hy = normal(rng, (64, 96), np.float16), normal(rng, (64, 96), np.float16)
    coef = normal(rng, (4,))

    def f(x, y, z, u, a, d, h, hy, coef):
        horner = ((coef[0] * x + coef[1]) * x + coef[2]) * x + coef[3]
        shared = u * z
        return (x * y + z, z - x * u, y * u - z, x * z + y * u, a * x + y, horner, d * d + d,
                shared + x, shared - y, h * hy + h)

    return f, (x, y, z, u, a, d, h, hy, coef)


@op_case("f64_math", "f64 exp, tanh, log1p, softplus, logistic and expm1 over their whole "
         "ranges (edges, NaN, infinities, denormals, the clamps at -708.4/709.8 and 17.7/20, "
         "expm1's switch at 1/2): XLA CPU computes exp, tanh and log1p with its own rational "
         "approximations, not libm's, and expm1 from its exp and tanh. "
         "tests/test_xla_numerics.py checks that compiled modules match bit for bit.",
         rtol=1e-12, atol=1e-300, x64=True)
def _f64_math(rng):
    import jax
    import jax.numpy as jnp

    edges = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324, -5e-324, 2.2e-308, 1e-300,
                      1e-20, 1e-10, 4e-4, 0.41421356, 0.4142136, -0.41421356, -0.4142136,
                      17.7, 17.72, 19.99, 20.0, -20.0, 700.0, 709.78, 709.79, -708.39,
                      -708.4, -745.0, -1.0, -1.5, 1e308, 0.5, -0.5, 0.5000000000000001,
                      -0.5000000000000001, 1e-5, -3e-308])
    x = np.concatenate([edges, rng.uniform(-30, 30, 4000), rng.standard_normal(4000),
                        rng.uniform(-750, 750, 2000), rng.uniform(-0.999, 1.0, 2000)])

    def f(x):
        return (jnp.exp(x), jnp.tanh(x), jnp.log1p(x), jax.nn.softplus(x), jax.nn.sigmoid(x),
                jnp.expm1(x))

    return f, (x,)


@op_case("f64_libm", "f64 sin, cos, tan, atan2 and pow, a sin and a cos of one value, and "
         "exp(-x^2) sin(3x) in one fusion, over their edges (zeros, denormals, infinities, NaN, "
         "huge arguments) and ordinary ranges: XLA CPU takes these from libm, one call per element "
         "inside otherwise vectorized loops. tests/test_xla_numerics.py checks compiled modules "
         "bit for bit.", rtol=1e-12, atol=1e-13, x64=True)
def _f64_libm(rng):
    import jax.numpy as jnp

    edges = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324, -5e-324, 2.2e-308, 1e-300,
                      1e-20, 0.5, 1.0, -1.0, 1.5707963267948966, 3.141592653589793, 1e5, 1e22,
                      -1e22, 1e300, 1.7976931348623157e308])
    x = np.concatenate([edges, rng.uniform(-10, 10, 3000), rng.standard_normal(2000) * 1e6,
                        10.0 ** rng.uniform(-300, 300, 1000)])
    y = np.concatenate([edges[::-1], rng.uniform(-10, 10, 3000), rng.standard_normal(2000),
                        rng.uniform(-3, 3, 1000)])

    def f(x, y):
        s, c = jnp.sin(x), jnp.cos(x)
        return (s, c, jnp.tan(x), jnp.arctan2(x, y), jnp.power(jnp.abs(x), y), s * c + c,
                jnp.exp(-y * y) * jnp.sin(3 * y))

    return f, (x, y)


@op_case("triangular_solves", "Batched triangular solves as jax lowers them on CPU: a Gaussian "
         "mixture's per-component solves (lapack_strsm_ffi with a batch dimension), every "
         "side / triangle / transpose / unit-diagonal option, one of order 130 (LAPACK's "
         "size), and an f16 solve, which jax leaves as the HLO triangular-solve opcode. The CPU "
         "back end solves matrices up to order 128 in kernels (codegen/cpu/trsm.py).",
         rtol=2e-3, atol=2e-3)
def _triangular_solves(rng):
    import jax
    import jax.numpy as jnp
    from jax.scipy.linalg import solve_triangular

    k, d, n = 4, 8, 300

    def tri(shape, dtype=np.float32):
        return (0.3 * normal(rng, shape) + 2.0 * np.eye(shape[-1])).astype(dtype)

    chol, x, means = tri((k, d, d)), normal(rng, (n, d)), normal(rng, (k, d))
    small, rhs = tri((3, 5, 5)), normal(rng, (3, 5, 6))
    big, big_rhs = tri((130, 130)), normal(rng, (130, 3))
    half, half_rhs = tri((2, 4, 4), np.float16), normal(rng, (2, 4, 3)).astype(np.float16)

    def f(chol, x, means, small, rhs, big, big_rhs, half, half_rhs):
        lower = jnp.tril(chol)
        z = solve_triangular(lower, jnp.swapaxes(x[None] - means[:, None], 1, 2), lower=True)
        loglik = jax.nn.logsumexp(-0.5 * jnp.sum(z * z, axis=1), axis=0)
        variants = [solve_triangular(small, rhs, lower=lo, trans=t, unit_diagonal=u)
                    for lo in (True, False) for t in (0, 1) for u in (False, True)]
        right = jax.lax.linalg.triangular_solve(small, jnp.swapaxes(rhs, 1, 2), left_side=False,
                                                lower=True, transpose_a=True)
        return (loglik, jnp.stack(variants), right, solve_triangular(big, big_rhs, lower=False),
                jax.lax.linalg.triangular_solve(half, half_rhs, left_side=True, lower=True))

    return f, (chol, x, means, small, rhs, big, big_rhs, half, half_rhs)


# --------------------------------------------------------------------------------------
# HLO text helpers: opcode histograms, fusion / instruction counts, custom-call targets
# --------------------------------------------------------------------------------------

_INSTR_RE = re.compile(r"^\s*(?:ROOT\s+)?%?([A-Za-z0-9_.\-]+)\s*=\s*(.*)$")
_OPCODE_RE = re.compile(r"^([a-z][a-z0-9\-]*)\(")


def _split_shape(rest: str) -> tuple[str, str]:
    if rest.startswith("("):
        depth = 0
        for i, ch in enumerate(rest):
            if ch in "({[":
                depth += 1
            elif ch in ")}]":
                depth -= 1
                if depth == 0:
                    return rest[: i + 1], rest[i + 1 :].lstrip()
        return rest, ""
    sp = rest.find(" ")
    return (rest, "") if sp < 0 else (rest[:sp], rest[sp + 1 :].lstrip())


def hlo_instructions(text: str) -> list[tuple[str, str, str]]:
    """(computation, instruction name, opcode) for every instruction in an HLO text module."""
    out = []
    comp = None
    for line in text.splitlines():
        s = line.strip()
        if comp is None:
            if s.endswith("{") and " = " not in s and not s.startswith("HloModule"):
                comp = s.split()[1] if s.startswith("ENTRY") else s.split()[0]
            continue
        if s == "}":
            comp = None
            continue
        m = _INSTR_RE.match(s)
        if not m:
            continue
        _, rest = _split_shape(m.group(2))
        om = _OPCODE_RE.match(rest)
        if om:
            out.append((comp.lstrip("%"), m.group(1), om.group(1)))
    return out


def opcode_histogram(text: str) -> Counter:
    return Counter(op for _, _, op in hlo_instructions(text))


def custom_call_targets(text: str) -> list[str]:
    return sorted(set(re.findall(r'custom_call_target="([^"]+)"', text)))


# --------------------------------------------------------------------------------------
# dtype handling
# --------------------------------------------------------------------------------------

_NP_TO_XLA = {
    "bool": "pred", "int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64", "uint8": "u8",
    "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "f16", "float32": "f32", "float64": "f64",
    "complex64": "c64", "complex128": "c128", "bfloat16": "bf16", "float8_e4m3fn": "f8e4m3fn",
    "float8_e5m2": "f8e5m2", "float8_e4m3fnuz": "f8e4m3fnuz", "float8_e5m2fnuz": "f8e5m2fnuz",
    "float8_e4m3b11fnuz": "f8e4m3b11fnuz", "float8_e4m3": "f8e4m3", "float8_e3m4": "f8e3m4",
    "float8_e8m0fnu": "f8e8m0fnu", "float4_e2m1fn": "f4e2m1fn", "int4": "s4", "uint4": "u4", "int2": "s2",
    "uint2": "u2",
}
_NATIVE = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
           "float32", "float64", "complex64", "complex128"}
_SUBBYTE_BITS = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2, "float4_e2m1fn": 4}


def xla_dtype_name(dt: np.dtype) -> str:
    return _NP_TO_XLA[np.dtype(dt).name]


def to_storage(a: np.ndarray) -> np.ndarray:
    """Array as stored in .npz: native dtypes unchanged, others as raw bits in an unsigned int."""
    name = a.dtype.name
    if name in _NATIVE:
        return a
    if name in _SUBBYTE_BITS:
        import ml_dtypes

        bits = _SUBBYTE_BITS[name]
        if name.startswith("float"):
            raw = a.view(np.uint8)
        else:
            raw = a.astype(np.int8).view(np.uint8) if name.startswith("int") else a.astype(np.uint8)
        del ml_dtypes
        return (raw & ((1 << bits) - 1)).astype(np.uint8)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def from_storage(raw: np.ndarray, xla_dtype: str) -> np.ndarray:
    """Inverse of to_storage, given the true XLA dtype name recorded in NAME.json."""
    import ml_dtypes

    inv = {v: k for k, v in _NP_TO_XLA.items()}
    name = inv[xla_dtype]
    if name in _NATIVE:
        return raw.astype(np.dtype(name), copy=False)
    dt = np.dtype(getattr(ml_dtypes, name))
    if name in _SUBBYTE_BITS:
        bits = _SUBBYTE_BITS[name]
        if name.startswith("float"):
            return raw.astype(np.uint8).view(dt)
        if name.startswith("int"):
            v = raw.astype(np.int16)
            v = np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
            return v.astype(np.int8).astype(dt)
        return raw.astype(np.uint8).astype(dt)
    return raw.view(dt)


def _tolerance_for(xla_dtype: str, s: Sample) -> dict:
    if xla_dtype in ("pred",) or xla_dtype[0] in "su":
        return {"rtol": 0.0, "atol": 0.0}
    if s.rtol == 0 and s.atol == 0:
        return {"rtol": 0.0, "atol": 0.0}
    if xla_dtype == "bf16":
        return {"rtol": max(s.rtol, 1e-2), "atol": max(s.atol, 1e-2)}
    if xla_dtype == "f16":
        return {"rtol": max(s.rtol, 2e-3), "atol": max(s.atol, 1e-3)}
    if xla_dtype.startswith("f8") or xla_dtype.startswith("f4"):
        return {"rtol": max(s.rtol, 0.125), "atol": max(s.atol, 0.0625)}
    return {"rtol": s.rtol, "atol": s.atol}


# --------------------------------------------------------------------------------------
# Worker: lower, compile, run and write one sample (run in a fresh process)
# --------------------------------------------------------------------------------------


def configure_jax(x64: bool):
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_enable_x64", bool(x64))
    # Source file names in op metadata: keep only the base name (checkout-independent).
    jax.config.update("jax_hlo_source_file_canonicalization_regex", r".*/")
    # Keep only the innermost user frame (the line in the sample function), so the driver's
    # own call stack (which differs between generate.py and check.py) is not recorded.
    jax.config.update("jax_traceback_in_locations_limit", 1)
    return jax


def build_sample(s: Sample):
    """(fn, args, flat numpy leaves) for a sample; uses numpy only."""
    import jax

    rng = np.random.default_rng(s.seed)
    fn, args = s.build(rng)
    leaves = jax.tree_util.tree_leaves(args)
    for leaf in leaves:
        assert isinstance(leaf, np.ndarray), (s.name, type(leaf))
    return fn, args, leaves


def _shape_desc(shape) -> tuple[str, list[int]]:
    """(dtype name, dims) of an XLA shape object (array shapes only)."""
    txt = str(shape)
    m = re.match(r"^([a-z0-9]+)\[([0-9,]*)\]", txt)
    assert m, txt
    dims = [int(d) for d in m.group(2).split(",") if d]
    return m.group(1), dims


def save_npz(path: Path, arrays: dict[str, np.ndarray]):
    """Like np.savez (uncompressed, loadable by np.load) but byte-for-byte reproducible:
    fixed zip timestamps, so regenerating an unchanged sample leaves the file unchanged."""
    import io
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for key, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def run_worker(name: str, out_root: Path) -> dict:
    s = SAMPLES[name]
    jax = configure_jax(s.x64)
    fn, args, leaves = build_sample(s)

    jitted = jax.jit(fn, keep_unused=True, **s.jit_kwargs)
    lowered = jitted.lower(*args)
    comp = lowered.compiler_ir("hlo")
    pb = comp.as_serialized_hlo_module_proto()
    text = comp.as_hlo_text()
    pshape = comp.program_shape()

    params = pshape.parameter_shapes()
    assert len(params) == len(leaves), (name, len(params), len(leaves))
    for i, (ps, leaf) in enumerate(zip(params, leaves, strict=True)):
        dt, dims = _shape_desc(ps)
        assert dt == xla_dtype_name(leaf.dtype) and dims == list(leaf.shape), (name, i, str(ps), leaf.dtype, leaf.shape)

    t0 = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    opt = compiled.runtime_executable().hlo_modules()[0]
    opt_pb = opt.as_serialized_hlo_module_proto()
    opt_text = opt.to_string()

    outs = compiled(*args)
    out_leaves = [np.asarray(o) for o in jax.tree_util.tree_leaves(outs)]
    rshape = pshape.result_shape()
    rlist = list(rshape.tuple_shapes()) if rshape.is_tuple() else [rshape]
    assert len(rlist) == len(out_leaves), (name, len(rlist), len(out_leaves))
    for i, (rs, o) in enumerate(zip(rlist, out_leaves, strict=True)):
        dt, dims = _shape_desc(rs)
        assert dt == xla_dtype_name(o.dtype) and dims == list(o.shape), (name, i, str(rs), o.dtype, o.shape)

    mem = compiled.memory_analysis()
    opt_instrs = hlo_instructions(opt_text)
    entry_name = re.search(r"^ENTRY %?([^\s(]+)", opt_text, re.M).group(1)

    base = out_root / name
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_name(base.name + ".pb").write_bytes(pb)
    base.with_name(base.name + ".hlo").write_text(text)
    base.with_name(base.name + ".opt.pb").write_bytes(opt_pb)
    base.with_name(base.name + ".opt.hlo").write_text(opt_text)
    save_npz(base.with_name(base.name + ".inputs.npz"), {f"arg{i}": to_storage(a) for i, a in enumerate(leaves)})
    save_npz(base.with_name(base.name + ".expected.npz"), {f"out{i}": to_storage(a) for i, a in enumerate(out_leaves)})

    def desc(a):
        d = {"dtype": xla_dtype_name(a.dtype), "shape": list(a.shape)}
        st = to_storage(a).dtype
        if st != a.dtype:
            d["storage_dtype"] = st.name
        return d

    hist = opcode_histogram(text)
    meta = {
        "name": name,
        "description": s.description,
        "notes": s.notes,
        "jax_version": jax.__version__,
        "x64": s.x64,
        "jit_kwargs": s.jit_kwargs,
        "seed": s.seed,
        "params": [desc(a) for a in leaves],
        "outputs": [dict(desc(a), **_tolerance_for(xla_dtype_name(a.dtype), s)) for a in out_leaves],
        "result_is_tuple": bool(rshape.is_tuple()),
        "xla_temp_bytes": int(mem.temp_size_in_bytes),
        "xla_argument_bytes": int(mem.argument_size_in_bytes),
        "xla_output_bytes": int(mem.output_size_in_bytes),
        "xla_alias_bytes": int(mem.alias_size_in_bytes),
        "xla_generated_code_bytes": int(mem.generated_code_size_in_bytes),
        "xla_compile_seconds": round(compile_s, 4),
        "xla_fusion_count": sum(1 for _, _, op in opt_instrs if op == "fusion"),
        "xla_opt_instruction_count": len(opt_instrs),
        "xla_opt_entry_instruction_count": sum(1 for c, _, _ in opt_instrs if c == entry_name),
        "instruction_count": sum(hist.values()),
        "opcodes": dict(sorted(hist.items())),
        "opt_opcodes": dict(sorted(Counter(op for _, _, op in opt_instrs).items())),
        "custom_call_targets": custom_call_targets(text),
        "opt_custom_call_targets": custom_call_targets(opt_text),
        "tolerance": {"rtol": s.rtol, "atol": s.atol},
    }
    base.with_name(base.name + ".json").write_text(dump_json(meta))
    return meta


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def _spawn(name: str, out_root: Path, extra: list[str] | None = None, script: str | None = None) -> tuple[str, int, str]:
    cmd = [sys.executable, script or str(Path(__file__).resolve()), "--worker", name, "--out", str(out_root)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu")
    p = subprocess.run(cmd + (extra or []), capture_output=True, text=True, env=env)
    return name, p.returncode, (p.stdout + p.stderr)[-4000:]


def run_all(names: list[str], out_root: Path, jobs: int, script: str | None = None, label="generate") -> list[str]:
    failed = []
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        for name, rc, log in ex.map(lambda n: _spawn(n, out_root, script=script), names):
            status = "ok" if rc == 0 else "FAILED"
            print(f"[{label}] {name}: {status}", flush=True)
            if rc != 0:
                failed.append(name)
                print(log, flush=True)
            else:
                for line in log.splitlines():
                    if "note:" in line:
                        print(line, flush=True)
    return failed


def dump_json(obj) -> str:
    """Indented JSON with short lists of numbers (shapes) kept on one line."""
    text = json.dumps(obj, indent=1)
    text = re.sub(r"\[\s*([-0-9.e, \n]*?)\s*\]", lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",") if v.strip()) + "]", text)
    return text + "\n"


def write_index(out_root: Path):
    import jax
    import jaxlib
    import ml_dtypes

    entries, files_hist, total_hist, cc = [], Counter(), Counter(), {}
    for name in SAMPLES:
        j = out_root / f"{name}.json"
        if not j.exists():
            continue
        m = json.loads(j.read_text())
        entries.append({"name": name, "group": "ops" if name.startswith("ops/") else "models",
                        "description": m["description"], "num_params": len(m["params"]),
                        "num_outputs": len(m["outputs"]), "x64": m["x64"],
                        "custom_call_targets": m["custom_call_targets"]})
        total_hist.update(m["opcodes"])
        files_hist.update(m["opcodes"].keys())
        if m["custom_call_targets"]:
            cc[name] = m["custom_call_targets"]
    index = {
        "generator": "samples/generate.py",
        "generator_version": GENERATOR_VERSION,
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "ml_dtypes_version": ml_dtypes.__version__,
        "numpy_version": np.__version__,
        "platform": {"machine": platform.machine(), "system": platform.system(), "python": platform.python_version()},
        "count": len(entries),
        "samples": entries,
        "opcode_histogram": {
            op: {"instructions": total_hist[op], "samples": files_hist[op]}
            for op in sorted(total_hist, key=lambda o: (-total_hist[o], o))
        },
        "custom_call_targets": cc,
    }
    (out_root / "index.json").write_text(dump_json(index))
    return index


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="sample name (e.g. mlp or ops/divide_s32_edges); repeatable")
    ap.add_argument("--out", default=str(HERE), help="output directory (default: this directory)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    out_root = Path(a.out)
    if a.list:
        print("\n".join(SAMPLES))
        return 0
    if a.worker:
        run_worker(a.worker, out_root)
        return 0
    names = list(SAMPLES)
    if a.only:
        unknown = [n for n in a.only if n not in SAMPLES and "ops/" + n not in SAMPLES]
        if unknown:
            ap.error(f"unknown sample(s): {unknown}")
        names = [n if n in SAMPLES else "ops/" + n for n in a.only]
    out_root.mkdir(parents=True, exist_ok=True)
    failed = run_all(names, out_root, a.jobs)
    write_index(out_root)
    print(f"{len(names) - len(failed)} generated, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
