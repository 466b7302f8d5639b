"""Train on 101 samples (every sample: kscale's default); dump the weights (tests/multiprocess/test_every_sample.py).

every_sample.py MODE WORKDIR SHUFFLE EPOCHS
  MODE reference      plain Keras, one process, batch 2b, lr 2η, no shuffling (the target without shuffling)
  MODE mirrored       kscale, 2 logical CPUs, batch b, lr η
  MODE horovod        kscale under horovodrun -np 2, batch b, lr η
  MODE multi_worker   kscale, 2 TF_CONFIG workers, batch b, lr η
"""

import json
import os
import sys

import tensorflow as tf

mode, workdir, shuffle, epochs = sys.argv[1], sys.argv[2], sys.argv[3] == "shuffle", int(sys.argv[4])
if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

import kscale  # noqa: E402

SAMPLES, BATCH, LR = 101, 8, 0.05
rank = kscale.environment.current().rank
rng = np.random.default_rng(0)
x = rng.normal(size=(SAMPLES, 5)).astype("float32")
y = (x @ rng.normal(size=(5, 1))).astype("float32")
weights = rng.uniform(0.5, 1.5, size=SAMPLES).astype("float32")  # the user's own sample weights stay

tf.keras.utils.set_random_seed(1)
model = tf.keras.Sequential(
    [tf.keras.layers.Dense(4, activation="tanh", input_shape=(5,)), tf.keras.layers.Dense(1)]
)
one_process = mode in ("reference", "single")
model.compile(optimizer=tf.keras.optimizers.SGD(LR * (2 if one_process else 1)), loss="mse")
if mode != "reference":
    options = {"backend": "mirrored", "devices": ["CPU:0", "CPU:1"]} if mode == "mirrored" else {}
    model = kscale.distribute(model, print_plan=False, **options)
history = model.fit(
    x, y, sample_weight=weights, batch_size=2 * BATCH if one_process else BATCH, epochs=epochs,
    shuffle=shuffle, verbose=0,
)  # fmt: skip
result = {
    "weights": [w.tolist() for w in model.get_weights()],
    "epochs": len(history.history["loss"]),
    "notes": list(getattr(model, "kscale_plan", None).notes) if mode != "reference" else [],
}
with open(os.path.join(workdir, f"result.{rank}.json"), "w") as f:
    json.dump(result, f)
