"""How long Keras' `fit` takes to return after its last callback, with and without tf.data's autotuning.

    python benchmarks/fit_end_hold.py arrays|dataset|dataset-no-autotune [--fits 12]

MobileNetV2 (32x32) in one process, `fit(epochs=1)` called again and again, as `kscale bench`'s one-job
launches do. Prints the seconds from `on_train_end` to `fit` returning, per fit after the first, and the
Python garbage collections over 50 ms (one a run, also with autotuning off, where no fit holds). The hold
goes away with tf.data's autotuning off; the likely wait is the fit's iterator, when destroyed, joining
the autotuning thread (results in RESULTS.md).
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np
import tensorflow as tf


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", choices=["arrays", "dataset", "dataset-no-autotune"])
    p.add_argument("--fits", type=int, default=12)
    args = p.parse_args()

    collections: list[tuple[int, float]] = []
    started: list[float] = []

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        else:
            collections.append((info["generation"], time.perf_counter() - started[0]))

    gc.callbacks.append(timed)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(640, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, 640).astype("int32")
    model = tf.keras.applications.MobileNetV2(input_shape=(32, 32, 3), weights=None, classes=10)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.9), loss=loss)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    if args.input == "dataset-no-autotune":
        options = tf.data.Options()
        options.autotune.enabled = False
        data = data.with_options(options)
    ended: list[float] = []

    class TrainEnd(tf.keras.callbacks.Callback):
        def on_train_end(self, logs=None):
            ended[:] = [time.perf_counter()]

    holds = []
    for _ in range(args.fits):
        if args.input == "arrays":
            model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[TrainEnd()])
        else:
            model.fit(data, epochs=1, verbose=0, callbacks=[TrainEnd()])
        holds.append(time.perf_counter() - ended[0])
    print(args.input, "seconds from on_train_end to fit returning:", " ".join(f"{h:.3f}" for h in holds[1:]))
    print("garbage collections over 50 ms:", [(g, round(d, 3)) for g, d in collections if d > 0.05])


if __name__ == "__main__":
    main()
