"""Quick start, tf.keras (TensorFlow 2.15, or tf_keras with TF_USE_LEGACY_KERAS=1): a small classifier
trained with the one line. The same file runs as one process and under every launcher:

    python examples/quickstart/tf_keras.py
    kscale run -np 2 -- python examples/quickstart/tf_keras.py
    horovodrun -np 2 -H localhost:2 --gloo python examples/quickstart/tf_keras.py
"""

from __future__ import annotations

import sys

import numpy as np
import tensorflow as tf

import kscale  # before the first TensorFlow operation: pins GPUs, sets up multi-worker TF if asked


def main(output: str = "quickstart.keras") -> None:
    rng = np.random.default_rng(0)  # the same data on every worker: kscale gives each its part
    x = rng.normal(size=(2048, 20)).astype("float32")
    y = (x[:, :5].sum(axis=1) > 0).astype("int32")

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((20,)),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
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
