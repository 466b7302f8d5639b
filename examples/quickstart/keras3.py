"""Quick start, Keras 3 (JAX, TensorFlow or PyTorch: Keras reads KERAS_BACKEND): a small classifier
trained with the one line. The same file runs as one process and under every launcher:

    KERAS_BACKEND=jax python examples/quickstart/keras3.py
    KERAS_BACKEND=jax kscale run -np 2 -- python examples/quickstart/keras3.py
"""

from __future__ import annotations

import sys

import keras
import numpy as np

import kscale  # before building the model: joins the job the launcher describes (a no-op in one process)


def main(output: str = "quickstart.keras") -> None:
    rng = np.random.default_rng(0)  # the same data on every worker: kscale gives each its part
    x = rng.normal(size=(2048, 20)).astype("float32")
    y = (x[:, :5].sum(axis=1) > 0).astype("int32")

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((20,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    model = kscale.distribute(model)  # the one line
    model.fit(x, y, batch_size=32, epochs=3, validation_split=0.2)  # 32 per replica
    loss, accuracy = model.evaluate(x, y, verbose=0)  # every sample once, whatever the number of workers
    print(f"rank {kscale.rank()}: loss {loss:.4f}")
    model.save(output)  # written once, by the chief
    if kscale.is_chief():
        print(f"accuracy {accuracy:.3f} with {kscale.size()} worker(s), saved {output}")


if __name__ == "__main__":
    main(*sys.argv[1:])
