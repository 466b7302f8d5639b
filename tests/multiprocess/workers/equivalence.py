"""Train a small model with SGD and dump the final weights, for the equivalence tests.

equivalence.py reference OUT          one process, plain Keras, batch 2b, lr 2η
equivalence.py mirrored OUT           kscale, MirroredStrategy on 2 logical CPUs, batch b, lr η
horovodrun -np 2 ... equivalence.py horovod OUT   kscale under Horovod, batch b, lr η per rank;
                                      rank 1 starts from different weights (broadcast must fix it)
"""

import json
import sys

mode, out = sys.argv[1], sys.argv[2]

import tensorflow as tf  # noqa: E402

if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

import kscale  # noqa: E402

BATCH, LR, EPOCHS, SAMPLES = 4, 0.05, 2, 64


def build(seed: int) -> tf.keras.Model:
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(8, activation="tanh", input_shape=(5,)),
            tf.keras.layers.Dense(1),
        ]
    )
    return model


rng = np.random.default_rng(0)
x = rng.normal(size=(SAMPLES, 5)).astype("float32")
y = (x @ rng.normal(size=(5, 1)) + 0.1).astype("float32")

rank = kscale.environment.current().rank
model = build(seed=1 if rank == 0 else 99)  # rank 1 differs on purpose
initial = [w.tolist() for w in model.get_weights()]

if mode == "reference":
    model.compile(optimizer=tf.keras.optimizers.SGD(2 * LR), loss="mse")
    model.fit(x, y, batch_size=2 * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    trained = model
else:
    model.compile(optimizer=tf.keras.optimizers.SGD(LR), loss="mse")
    options = {"backend": "mirrored", "devices": ["CPU:0", "CPU:1"]} if mode == "mirrored" else {}
    trained = kscale.distribute(model, **options)
    trained.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)

result = {
    "rank": rank,
    "replicas": kscale.num_replicas(),
    "initial": initial,
    "final": [w.tolist() for w in trained.get_weights()],
    "iterations": int(trained.optimizer.iterations.numpy()),
}
with open(f"{out}.{rank}.json", "w") as f:
    json.dump(result, f)
