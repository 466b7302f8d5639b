"""Ray Train running a kscale program unchanged (docs/launch/ray-train.md): TorchTrainer with Keras 3 on
PyTorch, 2 workers on a local Ray cluster. The training function is the user's script; nothing in it
knows Ray. For Keras 3 on TensorFlow use ray.train.tensorflow.TensorflowTrainer and KERAS_BACKEND=tensorflow.

    python examples/ray/train.py
"""

from __future__ import annotations

import tempfile

import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train_func() -> None:
    import keras
    import numpy as np

    import kscale

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    model = kscale.distribute(model)
    x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
    model.fit(x, x.sum(axis=1, keepdims=True), batch_size=4, epochs=2, verbose=0)
    loss, mae = model.evaluate(x, x.sum(axis=1, keepdims=True), verbose=0)
    print(
        f"rank {kscale.rank()} of {kscale.size()}: backend {model.kscale_plan.backend}, loss {loss:.4f}, mae {mae:.4f}"
    )


if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"KERAS_BACKEND": "torch"}})
    TorchTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(storage_path=tempfile.mkdtemp()),
    ).fit()
    ray.shutdown()
