"""The larger CPU benchmark cases of issue 6, as JAX functions (dev only: needs jax).

`python benchmarks/cases.py` (with /work/jaxenv/bin/python or `make`'s jax venv) lowers each
case once and writes benchmarks/cases/NAME.pb (unoptimized HloModuleProto, what hloc compiles)
and NAME.json (parameter dtypes and shapes). The inputs are not stored: bench_cpu.py draws
them from a fixed seed (`case_inputs`), identically for hloc and for XLA.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "cases"
CASES: dict[str, tuple] = {}


# How closely hloc's outputs must agree with XLA's (bench_cpu.py), unless a case says.
TOLERANCE = {"rtol": 2e-3, "atol": 2e-4}


def case(name: str, description: str, tolerance: dict | None = None):
    def register(fn):
        CASES[name] = (fn, description, tolerance or TOLERANCE)
        return fn
    return register


def f32(*shape):
    return ("float32", shape)


def bf16(*shape):
    return ("bfloat16", shape)


def s8(*shape):
    return ("int8", shape)


@case("matmul_1024", "f32 1024x1024 @ 1024x1024")
def _matmul():
    return (lambda a, b: a @ b), [f32(1024, 1024), f32(1024, 1024)]


@case("mlp_b256", "MLP 784-1024-1024-10 at batch 256: dense+relu x2, dense, softmax")
def _mlp():
    import jax

    def f(x, w1, b1, w2, b2, w3, b3):
        h = jax.nn.relu(x @ w1 + b1)
        h = jax.nn.relu(h @ w2 + b2)
        return jax.nn.softmax(h @ w3 + b3, axis=-1)
    return f, [f32(256, 784), f32(784, 1024), f32(1024), f32(1024, 1024), f32(1024),
               f32(1024, 10), f32(10)]


# Outputs up to about 4: a bf16 rounding of the hidden layer that an f32 ulp of its sum flips
# moves an output by up to one of its ulps.
@case("mlp_bf16", "bf16 MLP 1024-4096-1024 at batch 512: dense+gelu, dense (bf16 values "
      "throughout, as mixed-precision inference runs it)", {"rtol": 2e-3, "atol": 1.6e-2})
def _mlp_bf16():
    import jax

    def f(x, w1, b1, w2, b2):
        return jax.nn.gelu(x @ w1 + b1) @ w2 + b2
    return f, [bf16(512, 1024), bf16(1024, 4096), bf16(4096), bf16(4096, 1024), bf16(1024)]


@case("matmul_int8", "int8 512x1024 @ 1024x1024 accumulated in int32, dequantized by row and "
      "column scales (a quantized linear layer)")
def _matmul_int8():
    import jax
    import jax.numpy as jnp

    def f(a, b, sa, sb):
        acc = jax.lax.dot(a, b, preferred_element_type=jnp.int32)
        return acc.astype(jnp.float32) * sa * sb
    return f, [s8(512, 1024), s8(1024, 1024), f32(512, 1), f32(1, 1024)]


@case("elementwise_16m", "16M-element chain: tanh(x*a+b) * exp(-|x|) + sqrt(|x|+1) - x/2")
def _elementwise():
    import jax.numpy as jnp

    def f(x, y):
        return jnp.tanh(x * 1.5 + y) * jnp.exp(-jnp.abs(x)) + jnp.sqrt(jnp.abs(x) + 1.0) - x * 0.5
    return f, [f32(1 << 24), f32(1 << 24)]


@case("reduce_rows_4096", "row sums of f32 4096x4096")
def _rows():
    return (lambda x: x.sum(axis=1)), [f32(4096, 4096)]


@case("reduce_cols_4096", "column sums of f32 4096x4096")
def _cols():
    return (lambda x: x.sum(axis=0)), [f32(4096, 4096)]


@case("resnet_block", "ResNet basic block, NHWC 8x56x56x64: conv3x3-scale-relu-conv3x3-scale-add-relu")
def _resnet():
    import jax
    from jax import lax

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def f(x, w1, s1, b1, w2, s2, b2):
        h = jax.nn.relu(conv(x, w1) * s1 + b1)
        h = conv(h, w2) * s2 + b2
        return jax.nn.relu(h + x)
    return f, [f32(8, 56, 56, 64), f32(3, 3, 64, 64), f32(64), f32(64), f32(3, 3, 64, 64),
               f32(64), f32(64)]


@case("attention", "self-attention block, batch 8, seq 128, model 256, 4 heads, + out proj")
def _attention():
    import jax
    import jax.numpy as jnp

    def f(x, wq, wk, wv, wo):
        b, s, d = x.shape
        heads = 4

        def split(t):
            return t.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)
        q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d // heads), axis=-1)
        out = (att @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
        return out @ wo
    return f, [f32(8, 128, 256), f32(256, 256), f32(256, 256), f32(256, 256), f32(256, 256)]


@case("scan_rnn_200", "200-step tanh RNN via lax.scan, batch 32, hidden 256, input 64")
def _rnn():
    import jax
    import jax.numpy as jnp

    def f(xs, h0, w, u, b):
        def step(h, x):
            h = jnp.tanh(h @ w + x @ u + b)
            return h, h
        h, hs = jax.lax.scan(step, h0, xs)
        return h, hs.sum(axis=0)
    return f, [f32(200, 32, 64), f32(32, 256), f32(256, 256), f32(64, 256), f32(256)]


@case("while_rnn_200", "the tanh RNN in a data-dependent while loop (until 200 steps or "
      "max |h| >= 2: no trip count for a compiler to find), batch 32, hidden 256, input 64")
def _while_rnn():
    import jax
    import jax.numpy as jnp

    def f(xs, h0, w, u, b):
        def cond(carry):
            i, h = carry
            return (i < xs.shape[0]) & (jnp.max(jnp.abs(h)) < 2.0)

        def body(carry):
            i, h = carry
            x = jax.lax.dynamic_index_in_dim(xs, i, keepdims=False)
            return i + 1, jnp.tanh(h @ w + x @ u + b)
        steps, h = jax.lax.while_loop(cond, body, (0, h0))
        return h, steps
    return f, [f32(200, 32, 64), f32(32, 256), f32(256, 256), f32(64, 256), f32(256)]


def case_inputs(params: list[dict], seed: int = 0) -> list[np.ndarray]:
    """Deterministic inputs for a case's parameters (scaled so nothing overflows)."""
    import ml_dtypes  # noqa: F401  (names the "bfloat16" dtype for numpy)

    rng = np.random.default_rng(seed)
    out = []
    for p in params:
        shape = tuple(p["shape"])
        if np.dtype(p["dtype"]).kind == "i":  # int8 values over their whole range
            info = np.iinfo(p["dtype"])
            out.append(rng.integers(info.min, info.max, shape, endpoint=True, dtype=p["dtype"]))
            continue
        fan = shape[-2] if len(shape) >= 2 else 1
        scale = 1.0 / np.sqrt(max(1, fan))
        out.append((rng.standard_normal(shape) * scale).astype(p["dtype"]))
    return out


def generate(names: list[str]) -> None:
    import jax

    CASES_DIR.mkdir(exist_ok=True)
    for name in names or sorted(CASES):
        fn, description, tolerance = CASES[name][0](), CASES[name][1], CASES[name][2]
        f, params = fn
        specs = [jax.ShapeDtypeStruct(shape, dtype) for dtype, shape in params]
        lowered = jax.jit(f).lower(*specs)
        pb = lowered.compiler_ir("hlo").as_serialized_hlo_module_proto()
        (CASES_DIR / f"{name}.pb").write_bytes(pb)
        meta = {"name": name, "description": description, "jax_version": jax.__version__,
                "params": [{"dtype": d, "shape": list(s)} for d, s in params],
                "tolerance": tolerance}
        (CASES_DIR / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(f"wrote {name}.pb ({len(pb)} bytes)")


if __name__ == "__main__":
    generate(sys.argv[1:])
