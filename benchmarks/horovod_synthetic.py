"""kscale's one line against Horovod's own Keras recipe on Horovod's synthetic benchmark, side by side.

    .venv/bin/python benchmarks/horovod_synthetic.py [--rounds 6] [--model MobileNetV2] [--batch-size 8]
        [--batches-per-iter 5] [--iters 10] [--size 224] [--output benchmarks/results/horovod-synthetic]

The training script is the shape of Horovod's `examples/tensorflow2/tensorflow2_keras_synthetic_benchmark.py`
(a Keras Applications model on random images, `tf.data` of one cached batch repeated, SGD, fit with
`steps_per_epoch`, the first epoch a warm-up, images per second timed per epoch on rank 0), written here
twice: with Horovod's lines (`hvd.init`, `DistributedOptimizer`, the broadcast and metric-averaging
callbacks) and with `kscale.distribute(model)` instead. Each round runs both under `horovodrun -np 2
--gloo`, in alternating order; the ratio is kscale's images per second over Horovod's, median over the
rounds (side by side, one machine, one run: the ratio, not the speeds, is the result).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = """
import sys, time
import numpy as np
import tensorflow as tf
{setup}

model_name, batch_size, per_iter, iters, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
model = getattr(tf.keras.applications, model_name)(weights=None, input_shape=(size, size, 3), classes=1000)
images = tf.random.uniform([batch_size, size, size, 3])
labels = tf.random.uniform([batch_size, 1], minval=0, maxval=999, dtype=tf.int64)
dataset = tf.data.Dataset.from_tensor_slices((images, labels)).cache().repeat().batch(batch_size)
optimizer = tf.keras.optimizers.SGD(0.01)
{distribute}

class Timing(tf.keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.speeds = []

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if epoch > 0:  # the first epoch warms up (tracing)
            self.speeds.append(batch_size * per_iter / (time.perf_counter() - self.start))

timing = Timing()
callbacks.append(timing)
model.fit(dataset, steps_per_epoch=per_iter * {steps_scale}, epochs=iters, callbacks=callbacks, verbose=0)
if {is_chief}:
    print("IMAGES_PER_SECOND", float(np.median(timing.speeds)), flush=True)
"""

HOROVOD = {
    "setup": "import horovod.tensorflow.keras as hvd\nhvd.init()",
    "distribute": (
        "optimizer = hvd.DistributedOptimizer(optimizer)\n"
        "model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=optimizer)\n"
        "callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]"
    ),
    "is_chief": "hvd.rank() == 0",
    "steps_scale": "1",
}
KSCALE = {
    "setup": "import kscale",
    "distribute": (
        "model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=optimizer)\n"
        "model = kscale.distribute(model, print_plan=False)\n"
        "callbacks = []"
    ),
    "is_chief": "kscale.is_chief()",
    # kscale counts steps_per_epoch for one replica and divides it among them: the same steps per worker
    "steps_scale": "kscale.size()",
}


def run(script: Path, args: argparse.Namespace) -> float:
    """Images per second of one run of `script` on 2 Horovod workers (the chief's median epoch)."""
    horovodrun = Path(sys.executable).parent / "horovodrun"
    command = [
        str(horovodrun), "-np", "2", "-H", "localhost:2", "--gloo",
        sys.executable, str(script),
        args.model, str(args.batch_size), str(args.batches_per_iter), str(args.iters), str(args.size),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    for line in done.stdout.splitlines():
        if "IMAGES_PER_SECOND" in line:
            return float(line.split()[-1])
    raise RuntimeError(f"no result from {script.name}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--model", default="MobileNetV2")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches-per-iter", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--output", default="benchmarks/results/horovod-synthetic")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="kscale-synthetic-"))
    scripts = {}
    for name, parts in (("horovod", HOROVOD), ("kscale", KSCALE)):
        scripts[name] = folder / f"with_{name}.py"  # not horovod.py: it would shadow the package
        scripts[name].write_text(SCRIPT.format(**parts))
    speeds: dict[str, list[float]] = {"horovod": [], "kscale": []}
    for round_ in range(args.rounds):
        order = ("horovod", "kscale") if round_ % 2 == 0 else ("kscale", "horovod")
        for name in order:
            speeds[name].append(run(scripts[name], args))
        print(
            f"round {round_ + 1}: horovod {speeds['horovod'][-1]:.2f}, kscale {speeds['kscale'][-1]:.2f} img/s"
        )
    ratios = [k / h for k, h in zip(speeds["kscale"], speeds["horovod"])]
    result = {
        "model": args.model,
        "batch_size": args.batch_size,
        "batches_per_iter": args.batches_per_iter,
        "iters": args.iters,
        "size": args.size,
        "img_per_s": speeds,
        "ratio_median": statistics.median(ratios),
        "ratio_of_medians": statistics.median(speeds["kscale"]) / statistics.median(speeds["horovod"]),
        "ratios": ratios,
        "date": time.strftime("%Y-%m-%d"),
    }
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("ratio_median", "ratio_of_medians")}))


if __name__ == "__main__":
    main()
