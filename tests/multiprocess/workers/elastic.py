"""Train under an elastic horovodrun with nothing but kscale.distribute (tests/multiprocess/test_elastic.py).

elastic.py WORKDIR EPOCHS
Each process appends one line per finished epoch to WORKDIR/epochs.<pid>.jsonl (epoch, world size, rank,
learning rate); whoever is rank 0 at the end writes WORKDIR/final.<rank>.json on every rank (weights,
epochs in the last fit's history). Epochs sleep a little, so the test can change the hosts meanwhile.
"""

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

import kscale
import kscale.model_state

workdir, epochs = sys.argv[1], int(sys.argv[2])
LR, BATCH = 0.01, 4
rng = np.random.default_rng(0)
x = rng.normal(size=(96, 5)).astype("float32")
y = (x @ rng.normal(size=(5, 1))).astype("float32")


class Log(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        backend = kscale.model_state.state_of(self.model).backend
        line = {
            "epoch": epoch,
            "size": backend.num_workers,
            "rank": backend.worker_index,
            # applied: the rate as written (one worker's) x the factor planned for this world
            "rate": float(self.model.optimizer.learning_rate.numpy()) * self.model.kscale_plan.lr_factor,
            "steps": self.params["steps"],
        }
        with open(os.path.join(workdir, f"epochs.{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
        time.sleep(float(os.environ.get("EPOCH_SLEEP", "1.0")))


kscale.set_seed(1)
model = tf.keras.Sequential(
    [tf.keras.layers.Dense(8, activation="tanh", input_shape=(5,)), tf.keras.layers.Dense(1)]
)
model.compile(optimizer=tf.keras.optimizers.SGD(LR, momentum=0.9), loss="mse")
model = kscale.distribute(model)
history = model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=[Log()])
backend = kscale.model_state.state_of(model).backend
result = {
    "size": backend.num_workers,
    "history_epochs": history.epoch,
    "weights": [w.tolist() for w in model.get_weights()],
}
with open(os.path.join(workdir, f"final.{backend.worker_index}.json"), "w") as f:
    json.dump(result, f)
