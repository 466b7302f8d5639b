"""Seed 001's experiment: an LSTM regression model, trained on 1 device, N local devices or N workers.

    python examples/lstm/train.py                                   # one process
    python examples/lstm/train.py --backend mirrored --cpu-devices 2  # MirroredStrategy, 2 replicas
    horovodrun -np 2 -H localhost:2 python examples/lstm/train.py   # Horovod, 2 workers
    kscale run -np 2 -- python examples/lstm/train.py               # the same, through kscale

The same file runs in every stack (README, "Which stack?"): tf.keras on TensorFlow 2.15 or with tf_keras,
Keras 3 on TensorFlow, Keras 3 on JAX (`KERAS_BACKEND=jax kscale run -np 2 -- python ...`, or one process
with `--backend jax --cpu-devices 2`). Without kscale this is a plain Keras script; the distributed
version differs by one line (marked).
Data: synthetic noisy sine sequences by default (predict the next value), or --data FILE.npz (arrays
`x` [samples, timesteps, features] and `y` [samples, 1]) or FILE.csv (each row one sequence, the last
column the target).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import zlib

import numpy as np


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help=".npz (x, y) or .csv file; default: synthetic sine sequences")
    p.add_argument("--samples", type=int, default=4096, help="synthetic samples")
    p.add_argument("--timesteps", type=int, default=24)
    p.add_argument("--units", type=int, default=32)
    p.add_argument("--epochs", type=int, default=4, help="epochs as for one worker")
    p.add_argument("--batch-size", type=int, default=32, help="per replica, in every mode")
    p.add_argument("--lr", type=float, default=0.005, help="single-replica learning rate")
    p.add_argument(
        "--backend", default=None, help="single | mirrored | horovod | multi_worker | jax (default: auto)"
    )
    p.add_argument(
        "--cpu-devices", type=int, default=0, help="split the CPU into N logical devices (mirrored)"
    )
    p.add_argument("--data-policy", default="shard", help="shard | divide_epochs | none")
    p.add_argument("--threads", type=int, default=0, help="TensorFlow threads per process (0: its default)")
    p.add_argument("--checkpoint", help="save a checkpoint here every epoch (rank 0 only, atomically)")
    p.add_argument("--save", help="save the trained model here at the end (rank 0 only, atomically)")
    p.add_argument(
        "--report",
        help="write wall time, samples/s and losses here as JSON (rank 0; every rank where the path has {rank})",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-shuffle", action="store_true", help="fit in the data's order (to compare runs exactly)"
    )
    p.add_argument("--no-kscale", action="store_true", help="plain Keras: train without kscale.distribute()")
    return p.parse_args(argv)


def load_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    if args.data and args.data.endswith(".npz"):
        with np.load(args.data) as f:
            x, y = f["x"].astype("float32"), f["y"].astype("float32")
        return (x[..., None] if x.ndim == 2 else x), y.reshape(len(y), -1)
    if args.data:
        table = np.loadtxt(args.data, delimiter=",", dtype="float32", ndmin=2)
        return table[:, :-1, None], table[:, -1:]
    rng = np.random.default_rng(args.seed)
    t = np.arange(args.timesteps + 1, dtype="float32")
    freq = rng.uniform(0.1, 0.5, size=(args.samples, 1))
    phase = rng.uniform(0, 2 * np.pi, size=(args.samples, 1))
    waves = np.sin(freq * t + phase) + rng.normal(0, 0.05, size=(args.samples, t.size))
    waves = waves.astype("float32")
    return waves[:, :-1, None], waves[:, -1:]


def keras_of_this_stack():
    """tf.keras where TensorFlow is installed (Keras 2, tf_keras or Keras 3 on TF), else Keras 3 (on JAX)."""
    try:
        import tensorflow as tf
    except ImportError:
        import keras

        return keras, None
    return tf.keras, tf


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.cpu_devices > 1:  # JAX: N CPU devices, before JAX starts
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.cpu_devices}"
        )
    import kscale  # before building the model: joins the job, pins GPUs, sets up multi-worker TF / JAX

    keras, tf = keras_of_this_stack()
    if (
        tf is not None and args.cpu_devices > 1
    ):  # before any op: lets MirroredStrategy run N replicas on one CPU
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.cpu_devices
        )
    if tf is not None and args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)

    x, y = load_data(args)
    kscale.set_seed(args.seed)
    model = keras.Sequential([keras.Input(x.shape[1:]), keras.layers.LSTM(args.units), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(args.lr), loss="mse", metrics=["mae"])

    chief, replicas = True, 1
    if not args.no_kscale:
        options = {"data_policy": args.data_policy}
        if args.backend:
            options["backend"] = args.backend
        if args.cpu_devices > 1 and tf is not None:
            options["devices"] = [f"CPU:{i}" for i in range(args.cpu_devices)]
        model = kscale.distribute(model, **options)  # <- the one line
        chief, replicas = kscale.is_chief(), kscale.num_replicas()

    callbacks = []
    if args.checkpoint:
        callbacks.append(keras.callbacks.ModelCheckpoint(args.checkpoint))
    start = time.perf_counter()
    history = model.fit(
        x,
        y,
        batch_size=args.batch_size,
        epochs=args.epochs,
        callbacks=callbacks,
        shuffle=not args.no_shuffle,
        verbose=2,
    )
    wall = time.perf_counter() - start
    epochs_run = len(history.history["loss"])
    divided = args.data_policy == "divide_epochs" and not args.no_kscale
    report = {
        "replicas": replicas,
        "epochs_run": epochs_run,
        "wall_s": round(wall, 3),
        # Samples trained on by all workers together: each sees all data under divide_epochs.
        "samples_per_s": round(len(x) * epochs_run * (replicas if divided else 1) / wall, 1),
        "final_loss": float(history.history["loss"][-1]),
        "eval_loss": float(model.evaluate(x, y, batch_size=args.batch_size, verbose=0)[0]),
        # The loss of always predicting the mean: a model that learned nothing does no better.
        "mean_predictor_loss": float(np.mean((y - y.mean()) ** 2)),
        # Every rank must end with the same weights (a CRC-32 of all of them).
        "weights_crc32": zlib.crc32(b"".join(np.asarray(w).tobytes() for w in model.get_weights())),
    }
    if args.save:
        model.save(args.save)  # every rank calls it; kscale writes on the chief only
    if chief:
        print("lstm result " + json.dumps(report), flush=True)
    if args.report and (chief or "{rank}" in args.report):
        path = args.report.replace("{rank}", str(kscale.rank()))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(report, f)
    return report


if __name__ == "__main__":
    main()
