"""The models `kscale bench` measures, and the user's own (`path/to/model.py:build` or a `.keras` file).

Built with the Keras of this process (tf.keras where TensorFlow is installed: Keras 2, tf_keras or Keras 3;
else `keras`), so the same benchmark runs in every lane. Each model comes with its synthetic data: the
benchmark measures training, not input. This module imports nothing of kscale's at import time: the
hand-written scripts the benchmark compares kscale with load it without importing kscale (whose import
joins a distributed job).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable
from typing import Any

import numpy as np


def keras_module() -> Any:
    """tf.keras where TensorFlow is installed (it is tf_keras under TF_USE_LEGACY_KERAS=1), else Keras 3."""
    try:
        import tensorflow as tf
    except ImportError:
        import keras

        return keras
    return tf.keras


def _error(message: str) -> Exception:
    from kscale.errors import OptionError

    return OptionError(message)


@dataclasses.dataclass(frozen=True)
class BenchModel:
    """A model to measure: how to build it, how to compile it, and data of its shape."""

    name: str
    description: str
    #: keras -> an uncompiled model.
    build: Callable[[Any], Any]
    #: (keras, learning rate factor) -> compile() keywords; the factor is the hand-written scripts' N.
    compile_args: Callable[[Any, float], dict]
    #: (samples, numpy Generator) -> (x, y)
    data: Callable[[int, np.random.Generator], tuple[Any, Any]]
    #: Whether hand-written Horovod and tf.distribute scripts can rebuild it (they compile it themselves).
    rebuildable: bool = True
    #: Per-replica batch and steps per timed iteration when not given: about a second an iteration on a
    #: laptop-class CPU core.
    batch: int = 32
    batches: int = 20


def _sgd(keras: Any, factor: float, rate: float = 0.01) -> Any:
    return keras.optimizers.SGD(rate * factor, momentum=0.9)


def _classes(samples: int, rng: np.random.Generator, classes: int) -> np.ndarray:
    return rng.integers(0, classes, size=(samples,)).astype("int32")


def _mlp(large: bool) -> BenchModel:
    width, features = (4096, 1024) if large else (1024, 256)

    def build(keras: Any) -> Any:
        return keras.Sequential(
            [
                keras.Input((features,)),
                keras.layers.Dense(width, activation="relu"),
                keras.layers.Dense(width, activation="relu"),
                keras.layers.Dense(10),
            ]
        )

    def compile_args(keras: Any, factor: float) -> dict:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return {"optimizer": _sgd(keras, factor), "loss": loss}

    def data(samples: int, rng: np.random.Generator) -> tuple[Any, Any]:
        return rng.standard_normal((samples, features), dtype="float32"), _classes(samples, rng, 10)

    return BenchModel(
        "mlp", f"MLP {features}-{width}-{width}-10", build, compile_args, data, batch=64, batches=100
    )


def _lstm(large: bool) -> BenchModel:
    """Seed 001's model: LSTM regression of the next value of a noisy sine sequence."""
    timesteps, units = (24, 256) if large else (24, 32)

    def build(keras: Any) -> Any:
        return keras.Sequential(
            [keras.Input((timesteps, 1)), keras.layers.LSTM(units), keras.layers.Dense(1)]
        )

    def compile_args(keras: Any, factor: float) -> dict:
        return {"optimizer": keras.optimizers.Adam(0.005 * factor), "loss": "mse"}

    def data(samples: int, rng: np.random.Generator) -> tuple[Any, Any]:
        t = np.arange(timesteps + 1, dtype="float32")
        waves = np.sin(rng.uniform(0.1, 0.5, (samples, 1)) * t + rng.uniform(0, 6.28, (samples, 1)))
        waves = waves.astype("float32")
        return waves[:, :-1, None], waves[:, -1:]

    label = f"LSTM({units}) on {timesteps} steps (seed 001)"
    return BenchModel("lstm", label, build, compile_args, data, batch=32, batches=100)


def _application(name: str, size: int, classes: int) -> BenchModel:
    def build(keras: Any) -> Any:
        make = getattr(keras.applications, name)
        return make(weights=None, input_shape=(size, size, 3), classes=classes)

    def compile_args(keras: Any, factor: float) -> dict:
        return {"optimizer": _sgd(keras, factor), "loss": "sparse_categorical_crossentropy"}

    def data(samples: int, rng: np.random.Generator) -> tuple[Any, Any]:
        images = rng.uniform(-1, 1, (samples, size, size, 3)).astype("float32")
        return images, _classes(samples, rng, classes)

    label = f"{name} {size}x{size}, {classes} classes (keras.applications)"
    return BenchModel(name.lower(), label, build, compile_args, data)


def _bert(large: bool) -> BenchModel:
    """A BERT encoder: token + position embeddings, then transformer layers (Keras' MultiHeadAttention),
    and a classifier on the mean of the last layer's outputs."""
    layers, hidden, heads, seq, vocab = (12, 768, 12, 128, 30522) if large else (2, 128, 2, 64, 8192)

    def build(keras: Any) -> Any:
        ids = keras.Input((seq,), dtype="int32")
        x = _position_embedding(keras)()(keras.layers.Embedding(vocab, hidden)(ids))
        x = keras.layers.LayerNormalization(epsilon=1e-12)(x)
        for _ in range(layers):
            attended = keras.layers.MultiHeadAttention(heads, hidden // heads)(x, x)
            x = keras.layers.LayerNormalization(epsilon=1e-12)(x + attended)
            inner = keras.layers.Dense(4 * hidden, activation="gelu")(x)
            x = keras.layers.LayerNormalization(epsilon=1e-12)(x + keras.layers.Dense(hidden)(inner))
        pooled = keras.layers.GlobalAveragePooling1D()(x)
        return keras.Model(ids, keras.layers.Dense(2)(keras.layers.Dense(hidden, activation="tanh")(pooled)))

    def compile_args(keras: Any, factor: float) -> dict:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return {"optimizer": keras.optimizers.Adam(2e-5 * factor), "loss": loss}

    def data(samples: int, rng: np.random.Generator) -> tuple[Any, Any]:
        return rng.integers(0, vocab, (samples, seq)).astype("int32"), _classes(samples, rng, 2)

    label = f"BERT encoder, {layers} layers, hidden {hidden}, {heads} heads, {seq} tokens"
    return BenchModel("bert", label, build, compile_args, data, batch=16, batches=20)


def _position_embedding(keras: Any) -> type:
    """A learned embedding per position, added to the token embeddings (BERT's)."""

    class PositionEmbedding(keras.layers.Layer):
        def build(self, input_shape):
            self.table = self.add_weight(name="positions", shape=tuple(input_shape[1:]), initializer="zeros")

        def call(self, inputs):
            return inputs + self.table

    return PositionEmbedding


#: name -> (model on CPU, model on GPU): GPU sizes are the ones people compare (ResNet50, BERT-base).
BUILT_IN: dict[str, Callable[[bool], BenchModel]] = {
    "mlp": _mlp,
    "lstm": _lstm,
    "cnn": lambda gpu: _application("ResNet50", 224, 1000) if gpu else _application("MobileNetV2", 32, 10),
    "bert": _bert,
}


def built_in(name: str, gpu: bool) -> BenchModel:
    if name not in BUILT_IN:
        raise _error(
            f"unknown benchmark model {name!r}: use one of {', '.join(BUILT_IN)}, or your own as "
            "path/to/model.py:build (a function returning a compiled Keras model) or a .keras file."
        )
    return BUILT_IN[name](gpu)


def is_user_model(name: str) -> bool:
    return name.endswith(".keras") or ":" in name


def user_model(spec: str, input_shape: tuple[int, ...] | None, sample: str | None) -> BenchModel:
    """The user's model: `file.py:function` (returns a compiled model) or a saved `.keras` file.

    Synthetic data takes the model's input shape (or `input_shape`); targets are integer classes when the
    loss is a sparse one, else random values of the output's shape. `sample` (.npz with x and y) replaces
    both with the user's own batch, repeated."""
    build = _user_builder(spec)

    def data(samples: int, rng: np.random.Generator) -> tuple[Any, Any]:
        if sample:
            with np.load(sample) as arrays:
                if "x" not in arrays or "y" not in arrays:
                    raise _error(f"--sample {sample}: the .npz needs arrays named x and y.")
                x, y = arrays["x"], arrays["y"]
            reps = -(-samples // len(x))
            return np.concatenate([x] * reps)[:samples], np.concatenate([y] * reps)[:samples]
        model = build(keras_module())
        shape = input_shape or tuple(model.input_shape[1:])
        if any(d is None for d in shape):
            raise _error(
                f"the model's input shape {shape} has unknown sizes: give --input-shape (e.g. 24,1) "
                "or --sample batch.npz"
            )
        dtype = getattr(model.inputs[0], "dtype", "float32")
        dtype = getattr(dtype, "name", dtype)
        if "int" in str(dtype):
            x = rng.integers(0, 100, (samples, *shape)).astype(str(dtype))
        else:
            x = rng.standard_normal((samples, *shape)).astype("float32")
        output = tuple(model.output_shape[1:])
        if "sparse" in _loss_name(model):
            return x, _classes(samples, rng, output[-1])
        return x, rng.standard_normal((samples, *output)).astype("float32")

    def compile_args(keras: Any, factor: float) -> dict:
        raise _error("hand-written baselines are measured on the built-in models only")

    return BenchModel(spec, f"your model ({spec})", build, compile_args, data, rebuildable=False)


def _loss_name(model: Any) -> str:
    loss = model.loss
    return str(getattr(loss, "name", None) or getattr(loss, "__name__", None) or loss).lower()


def _user_builder(spec: str) -> Callable[[Any], Any]:
    if spec.endswith(".keras"):
        if not os.path.exists(spec):
            raise _error(f"--model {spec}: no such file")
        return lambda keras: keras.models.load_model(spec)
    path, _, function = spec.rpartition(":")
    if not path.endswith(".py") or not function:
        raise _error(f"--model {spec!r}: expected path/to/model.py:function or a .keras file")
    if not os.path.exists(path):
        raise _error(f"--model {spec}: no such file {path}")

    def build(keras: Any) -> Any:
        module_spec = importlib.util.spec_from_file_location("kscale_bench_user_model", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        if not callable(getattr(module, function, None)):
            raise _error(f"--model {spec}: {path} has no function {function}()")
        model = getattr(module, function)()
        if getattr(model, "optimizer", None) is None:
            raise _error(f"--model {spec}: {function}() must return a compiled Keras model")
        return model

    return build


def defaults(name: str) -> BenchModel:
    """The model's defaults (batch, steps, whether hand-written scripts can rebuild it), without building
    it or importing a framework."""
    if is_user_model(name):
        _user_builder(name)  # says now, before any launch, when the file or the function's name is wrong
        return BenchModel(name, name, _unused, _unused, _unused, rebuildable=False)
    return built_in(name, gpu=False)


def _unused(*args: Any) -> Any:
    raise AssertionError("defaults() describes a model; it does not build one")


def resolve(name: str, gpu: bool, input_shape: tuple[int, ...] | None = None, sample: str | None = None):
    """A built-in model by name, or the user's model from its spec."""
    return user_model(name, input_shape, sample) if is_user_model(name) else built_in(name, gpu)
