"""The whole-model samples: Keras 3 / keras-hub models with random weights (dev only).

Each entry of MODELS is `name -> (description, build, rtol)`; `build(g)` (g: generate.py's
module, for its parameter helpers) returns `(fn, params)`: `fn(*args)` is what JAX lowers,
with the inputs first and every Keras variable after them as a parameter, and `params` lists
their dtypes, shapes and init recipes in the same order (names "x:..." and "w:...").
"""

from __future__ import annotations

import numpy as np

MODELS: dict[str, tuple] = {}
NORMAL = {"dist": "normal", "mean": 0.0, "std": 1.0}


def model(name: str, description: str, rtol: float = 2e-3):
    """Register a builder under `name`."""
    def register(build):
        MODELS[name] = (description, build, rtol)
        return build
    return register


def _input(g, name: str, shape, dtype, init: dict) -> dict:
    return g._param("x:" + name, np.zeros(shape, dtype), init)


def inference(g, net, inputs: list[dict], keys: list[str] | None = None, outs=None):
    """(fn, params) running `net.stateless_call` in inference mode. With `keys` the inputs go
    in as a dict (keras-hub backbones); `outs` picks outputs from a dict result."""
    tv, ntv = net.trainable_variables, net.non_trainable_variables
    n_in, n_t = len(inputs), len(tv)

    def fn(*args):
        xs, t, nt = args[:n_in], list(args[n_in:n_in + n_t]), list(args[n_in + n_t:])
        x = dict(zip(keys, xs, strict=True)) if keys else xs[0]
        y, _ = net.stateless_call(t, nt, x, training=False)
        return tuple(y[k] for k in outs) if outs else y
    return fn, inputs + g.keras_params(tv) + g.keras_params(ntv)


def _image(g, shape):
    return [_input(g, "image", shape, np.float32, NORMAL)]


@model("resnet50", "keras.applications.ResNet50, random weights, batch 1 at 224x224, logits")
def _resnet50(g):
    import keras

    net = keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3),
                                      classifier_activation=None)
    return inference(g, net, _image(g, (1, 224, 224, 3)))


@model("mobilenet_v2", "keras.applications.MobileNetV2, random weights, batch 1 at 224x224, logits")
def _mobilenet(g):
    import keras

    net = keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3),
                                         classifier_activation=None)
    return inference(g, net, _image(g, (1, 224, 224, 3)))


@model("efficientnet_b0", "keras.applications.EfficientNetB0, random weights, batch 1 at 224x224")
def _efficientnet(g):
    import keras

    net = keras.applications.EfficientNetB0(weights=None, input_shape=(224, 224, 3),
                                            classifier_activation=None)
    return inference(g, net, _image(g, (1, 224, 224, 3)))


TEXT = {"vocabulary_size": 8192, "num_layers": 4, "num_heads": 4, "hidden_dim": 256,
        "intermediate_dim": 1024, "max_sequence_length": 128}


def _tokens(g, batch: int, seq: int, segments: bool) -> tuple[list[dict], list[str]]:
    ids = _input(g, "token_ids", (batch, seq), np.int32,
                 {"dist": "ints", "lo": 0, "hi": TEXT["vocabulary_size"]})
    mask = _input(g, "padding_mask", (batch, seq), np.int32, {"dist": "const", "value": 1})
    if not segments:
        return [ids, mask], ["token_ids", "padding_mask"]
    seg = _input(g, "segment_ids", (batch, seq), np.int32, {"dist": "ints", "lo": 0, "hi": 2})
    return [ids, seg, mask], ["token_ids", "segment_ids", "padding_mask"]


@model("bert_encoder", "keras_hub BertBackbone: 4 layers, hidden 256, 4 heads, vocab 8192; "
       "batch 2 x 128 tokens -> pooled and sequence outputs")
def _bert(g):
    import keras_hub

    net = keras_hub.models.BertBackbone(**TEXT)
    inputs, keys = _tokens(g, 2, 128, segments=True)
    return inference(g, net, inputs, keys, outs=["pooled_output", "sequence_output"])


@model("gpt2_decoder", "keras_hub GPT2Backbone (causal): 4 layers, hidden 256, 4 heads, "
       "vocab 8192; batch 2 x 128 tokens -> sequence output")
def _gpt2(g):
    import keras_hub

    net = keras_hub.models.GPT2Backbone(**TEXT)
    inputs, keys = _tokens(g, 2, 128, segments=False)
    return inference(g, net, inputs, keys)


@model("lstm", "Keras LSTM(128, sequences) -> LSTM(128) -> Dense(10); batch 16 x 50 steps x 32")
def _lstm(g):
    import keras

    net = keras.Sequential([keras.Input((50, 32)), keras.layers.LSTM(128, return_sequences=True),
                            keras.layers.LSTM(128), keras.layers.Dense(10)])
    return inference(g, net, [_input(g, "sequence", (16, 50, 32), np.float32, NORMAL)])


@model("cnn_train_step", "one SGD step (lr 0.05) of a Keras CNN: 3 conv3x3+relu (16, 32/2, 32), "
       "global pool, dense 10; batch 32 at 32x32x3, softmax cross-entropy -> loss, new weights")
def _train_step(g):
    import jax
    import keras

    layers = keras.layers
    net = keras.Sequential([
        keras.Input((32, 32, 3)), layers.Conv2D(16, 3, padding="same", activation="relu"),
        layers.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.GlobalAveragePooling2D(), layers.Dense(10)])

    def fn(x, labels, *tv):
        def loss(t):
            logits, _ = net.stateless_call(list(t), [], x, training=True)
            logp = jax.nn.log_softmax(logits)
            return -jax.numpy.take_along_axis(logp, labels[:, None], axis=1).mean()
        value, grads = jax.value_and_grad(loss)(tv)
        return (value, *[w - 0.05 * d for w, d in zip(tv, grads, strict=True)])
    inputs = [_input(g, "image", (32, 32, 32, 3), np.float32, NORMAL),
              _input(g, "labels", (32,), np.int32, {"dist": "ints", "lo": 0, "hi": 10})]
    return fn, inputs + g.keras_params(net.trainable_variables)
