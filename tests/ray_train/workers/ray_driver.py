"""A kscale program run unchanged by Ray Train on a local Ray cluster of 2 workers.

ray_driver.py torch OUT        TorchTrainer (Keras 3 on torch): Ray makes the process group first
ray_driver.py tensorflow OUT   TensorflowTrainer (Keras 3 on TensorFlow): Ray sets TF_CONFIG, and
                               TF_USE_LEGACY_KERAS=1 in workers whose tf.keras is Keras 3 all the same
ray_driver.py tf.keras OUT     TensorflowTrainer, the program written with `tf.keras` where tf_keras is
                               installed (lane B)
Each worker writes OUT.RANK.json: its backend, world, the model's Keras, and final weights.
"""

import json
import sys
import tempfile

import ray
from ray.train import RunConfig, ScalingConfig

kind, OUT = sys.argv[1], sys.argv[2]


def train_func():
    """The user's program, as it runs alone: nothing in it knows Ray."""
    import numpy as np

    if kind == "tf.keras":
        import tensorflow as tf

        keras = tf.keras
    else:
        import keras

    import kscale

    if kind == "tf.keras":  # tf_keras' set_random_seed fails on Python 3.12 (randint of a float)
        tf.random.set_seed(1 + 100 * kscale.rank())
    else:
        keras.utils.set_random_seed(1 + 100 * kscale.rank())  # other weights on every rank: the chief's win
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    initial = [w.tolist() for w in model.get_weights()]
    model = kscale.distribute(model)
    x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    result = {
        "backend": model.kscale_plan.backend,
        "keras": type(model).__module__.split(".")[0],
        "size": kscale.size(),
        "rank": kscale.rank(),
        "history": history.history,
        "evaluate": model.evaluate(x, y, verbose=0, return_dict=True),
        "initial_weights": initial,
        "weights": [w.tolist() for w in model.get_weights()],
    }
    with open(f"{OUT}.{kscale.rank()}.json", "w") as f:
        json.dump(result, f)


if kind == "torch":
    from ray.train.torch import TorchTrainer as Trainer
else:
    from ray.train.tensorflow import TensorflowTrainer as Trainer

backend = "tensorflow" if kind == "tf.keras" else kind
ray.init(num_cpus=4, include_dashboard=False, runtime_env={"env_vars": {"KERAS_BACKEND": backend}})
trainer = Trainer(
    train_func,
    scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
    run_config=RunConfig(storage_path=tempfile.mkdtemp()),
)
trainer.fit()
ray.shutdown()
