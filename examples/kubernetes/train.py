"""A Keras 3 training script for the cluster recipes (examples/kubernetes, examples/slurm).

A plain Keras script plus the one line: it runs as one process (`python train.py`) and unchanged in every
process a cluster engine starts (Kubeflow Trainer's torch and JAX runtimes, a TFJob, SLURM). The backend
is Keras' own (`KERAS_BACKEND`: jax, tensorflow or torch). At the end every process prints one line with
its rank, the backend kscale picked and a checksum of its weights: the same checksum on every line is a
job that trained as one.
"""

from __future__ import annotations

import argparse
import zlib

import keras
import numpy as np

import kscale  # before building the model: joins the job that the launcher's variables describe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per replica (kscale's meaning)")
    parser.add_argument("--learning-rate", type=float, default=0.05, help="of one replica")
    parser.add_argument("--save", help="where the chief saves the trained model (a .keras file)")
    args = parser.parse_args()

    keras.utils.set_random_seed(0)  # the same initial weights everywhere (JAX requires it)
    rng = np.random.default_rng(0)  # the same data on every process: kscale gives each its part
    x = rng.normal(size=(1024, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1)) + 0.5).astype("float32")

    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(args.learning_rate), loss="mse", metrics=["mae"])
    model = kscale.distribute(model)  # the one line
    model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, shuffle=False, verbose=2)
    loss, mae = model.evaluate(x, y, verbose=0)
    if args.save:
        model.save(args.save)  # the chief writes it; every process calls save

    weights = b"".join(np.asarray(w, "float32").tobytes() for w in model.get_weights())
    print(
        f"kscale rank {kscale.rank()} of {kscale.size()}: backend {model.kscale_plan.backend}, "
        f"loss {loss:.6f}, mae {mae:.6f}, weights crc32 {zlib.crc32(weights):08x}",
        flush=True,
    )


if __name__ == "__main__":
    main()
