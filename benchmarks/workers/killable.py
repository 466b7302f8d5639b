"""A training job one of whose workers SIGKILLs itself at a chosen step (benchmarks/kill_trials.py).

killable.py WORKDIR KILL_RANK KILL_STEP
Every worker writes WORKDIR/pid.<rank>; the chief saves WORKDIR/last.keras after every epoch (kscale:
atomically); worker KILL_RANK writes WORKDIR/killed.json (time, rank, host, pid) and kills itself with
SIGKILL after global step KILL_STEP.
"""

import json
import os
import signal
import socket
import sys
import time

import numpy as np
import tensorflow as tf

import kscale

workdir, kill_rank, kill_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rank = kscale.rank()
with open(os.path.join(workdir, f"pid.{rank}"), "w") as f:
    f.write(str(os.getpid()))


class KillAtStep(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.step = 0

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if rank == kill_rank and self.step == kill_step:
            record = {"time": time.time(), "rank": rank, "host": socket.gethostname(), "pid": os.getpid()}
            with open(os.path.join(workdir, "killed.json"), "w") as f:
                json.dump(record, f)
            os.kill(os.getpid(), signal.SIGKILL)


rng = np.random.default_rng(0)
x = rng.normal(size=(256, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 1))).astype("float32")
kscale.set_seed(1)
model = tf.keras.Sequential(
    [tf.keras.layers.Dense(32, activation="relu", input_shape=(16,)), tf.keras.layers.Dense(1)]
)
model.compile(optimizer=tf.keras.optimizers.Adam(0.001), loss="mse")
model = kscale.distribute(model, print_plan=False)
checkpoint = tf.keras.callbacks.ModelCheckpoint(os.path.join(workdir, "last.keras"))
model.fit(x, y, batch_size=16, epochs=int(os.environ.get("KILLABLE_EPOCHS", "50")), verbose=0,
          callbacks=[checkpoint, KillAtStep()])  # fmt: skip
