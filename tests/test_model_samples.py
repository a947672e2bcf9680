"""The whole-model samples (samples/models/): Keras / keras-hub models lowered by JAX.

Each module keeps its weights as entry parameters; samples/models/weights.py rebuilds every
argument from NAME.json's recipes and seed. The cheap test loads each module (and XLA's
optimized one) and checks it against the JSON; the cpu test compiles the model with hloc,
runs it on the regenerated arguments and compares with XLA:CPU's outputs (NAME.expected.npz).
The convnets (5 to 7 s each on two loaded cores) are marked slow.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

MODELS = Path(__file__).resolve().parent.parent / "samples" / "models"
QUICK = {"lstm", "cnn_train_step", "bert_encoder", "gpt2_decoder"}  # each < 3 s on 2 cores


def _weights():
    spec = importlib.util.spec_from_file_location("model_weights", MODELS / "weights.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


weights = _weights()
NAMES = weights.model_names()


def _cases():
    return [pytest.param(n, marks=() if n in QUICK else pytest.mark.slow) for n in NAMES]


def test_models_present():
    assert {"resnet50", "mobilenet_v2", "bert_encoder", "gpt2_decoder", "lstm",
            "cnn_train_step"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_model_sample_loads(name):
    from hloc.frontend import load

    meta = weights.meta(name)
    for suffix in (".pb", ".opt.pb"):
        module = load(str(MODELS / f"{name}{suffix}")).module
        params = module.entry.parameters
        assert len(params) == len(meta["params"])
        for p, want in zip(params, meta["params"], strict=True):
            assert (p.shape.dtype.name, list(p.shape.dims)) == (want["dtype"], want["shape"])
    assert load(str(MODELS / f"{name}.pb")).module.instruction_count() == meta["instruction_count"]
    expected = weights.expected(name)
    assert [(list(e.shape)) for e in expected] == [o["shape"] for o in meta["outputs"]]


def test_weights_are_reproducible():
    meta = weights.meta("lstm")
    first, again = weights.arrays(meta), weights.arrays(meta)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert first[0].dtype == np.float32 and first[0].shape == tuple(meta["params"][0]["shape"])


@pytest.mark.cpu
@pytest.mark.parametrize("name", _cases())
def test_model_matches_xla(name, tmp_path):
    import hloc.runtime.cpu  # noqa: F401  (registers the device)
    from hloc.compiler import CompileOptions, compile
    from hloc.runtime import load

    bundle = tmp_path / f"{name}.bundle"
    compile(str(MODELS / f"{name}.pb"), str(bundle), CompileOptions(target="cpu", opt_level=2))
    meta = weights.meta(name)
    got = load(str(bundle), "cpu").run(weights.arrays(meta))
    expected = weights.expected(name)
    assert len(got) == len(expected)
    tol = meta["tolerance"]
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        err = float(np.max(np.abs(np.asarray(g, np.float64) - e))) if e.size else 0.0
        assert np.allclose(g, e, rtol=tol["rtol"], atol=tol["atol"]), f"out{i}: max error {err}"


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_model_on_gpu(name, tmp_path):
    """Every whole model on a real NVIDIA GPU (cuBLAS GEMMs where installed) against XLA."""
    from .test_cuda_samples import _cuda_device_available

    if not _cuda_device_available():
        pytest.skip("needs cuda-bindings and an NVIDIA GPU")
    from hloc.compiler import CompileOptions, compile
    from hloc.runtime import load

    bundle = tmp_path / f"{name}.bundle"
    compile(str(MODELS / f"{name}.pb"), str(bundle),
            CompileOptions(target="cuda", cuda_archs=("sm_80", "sm_90")))
    meta = weights.meta(name)
    got = load(str(bundle), "cuda").run(weights.arrays(meta))
    tol = meta["tolerance"]
    for i, (g, e) in enumerate(zip(got, weights.expected(name), strict=True)):
        err = float(np.max(np.abs(np.asarray(g, np.float64) - e))) if e.size else 0.0
        assert np.allclose(g, e, rtol=tol["rtol"], atol=tol["atol"]), f"out{i}: max error {err}"
