"""Rebuild a model sample's entry arguments (inputs and weights) from its JSON and seed.

The model samples in samples/models/ store no weights: each NAME.json lists every entry
parameter of NAME.pb in order, with its dtype, shape and an `init` recipe, and `arrays(meta)`
draws them again with numpy alone, bit for bit on any machine (PCG64 streams are stable):
parameter i uses `numpy.random.default_rng([seed, i])`. Recipes:

  {"dist": "normal", "mean": m, "std": s}   float: m + s * standard normal (f32 draws)
  {"dist": "ints", "lo": a, "hi": b}        integers uniform in [a, b)
  {"dist": "const", "value": v}             every element v
  {"dist": "values", "values": [...]}       the given elements, exactly (small arrays)

JAX is never needed: hloc's tests and `make bench` import this module from the hloc venv.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

NUMPY = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "s32": np.int32,
         "s64": np.int64, "u32": np.uint32, "u8": np.uint8, "pred": np.bool_}


def model_names() -> list[str]:
    """The model samples that have a module (samples/models/NAME.pb)."""
    return sorted(p.name[: -len(".pb")] for p in HERE.glob("*.pb")
                  if not p.name.endswith(".opt.pb"))


def meta(name: str) -> dict:
    """NAME.json: params with init recipes, outputs, tolerance, XLA's statistics."""
    return json.loads((HERE / f"{name}.json").read_text())


def draw(init: dict, dtype: str, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """One array from its recipe (see the module docstring)."""
    np_dtype = NUMPY[dtype]
    dist = init["dist"]
    if dist == "normal":
        x = rng.standard_normal(shape, dtype=np.float32) * np.float32(init["std"])
        return (x + np.float32(init["mean"])).astype(np_dtype)
    if dist == "ints":
        return rng.integers(init["lo"], init["hi"], shape, endpoint=False).astype(np_dtype)
    if dist == "const":
        return np.full(shape, init["value"], dtype=np_dtype)
    if dist == "values":
        return np.asarray(init["values"], dtype=np_dtype).reshape(shape)
    raise ValueError(f"unknown init recipe {dist!r}")


def arrays(model: dict | str) -> list[np.ndarray]:
    """Every entry argument of the model, in parameter order (`model`: JSON dict or name)."""
    m = meta(model) if isinstance(model, str) else model
    return [draw(p["init"], p["dtype"], tuple(p["shape"]), np.random.default_rng([m["seed"], i]))
            for i, p in enumerate(m["params"])]


def expected(name: str) -> list[np.ndarray]:
    """XLA:CPU's outputs for the regenerated arguments (NAME.expected.npz: out0, out1, ...)."""
    with np.load(HERE / f"{name}.expected.npz") as z:
        return [z[f"out{i}"] for i in range(len(z.files))]
