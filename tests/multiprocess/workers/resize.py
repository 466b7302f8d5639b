"""A job saved by N workers, resumed by M (tests/multiprocess/test_resize.py): rate, steps, optimizer state.

resize.py HOW MODE WORKDIR PHASE
  HOW     backup (BackupAndRestore, the job dies after epoch 2 of 4) | checkpoint (ModelCheckpoint to a
          .keras file each epoch; phase 2 loads the last one and passes initial_epoch=2)
  MODE    single | horovod (under horovodrun) | multi_worker (TF_CONFIG)
  PHASE   1 (train, then die / stop after epoch 2) or 2 (resume with however many workers run it)
"""

import json
import os
import sys

how, mode, workdir, phase = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kscale  # noqa: E402

BATCH, LR, EPOCHS, SAMPLES = 4, 0.01, 4, 64
rank = kscale.environment.current().rank
rng = np.random.default_rng(0)
x = rng.normal(size=(SAMPLES, 5)).astype("float32")
y = (x @ rng.normal(size=(5, 1))).astype("float32")
checkpoint = os.path.join(workdir, "epoch-{epoch}.keras")


class Probe(tf.keras.callbacks.Callback):
    """What training starts from (after any restore) and which epochs run, at which rate."""

    def __init__(self):
        super().__init__()
        self.result = {"epochs": [], "rates": [], "written_rates": []}

    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        # Keras creates the slots at the first step, and a checkpoint's values land in them then:
        # create them now to read what the step will start from.
        with self.model.distribute_strategy.scope():
            optimizer.build(self.model.trainable_variables)
        self.result["start_iterations"] = int(optimizer.iterations.numpy())
        self.result["start_slots"] = float(sum(np.abs(v.numpy()).sum() for v in optimizer.variables[1:]))

    def on_epoch_begin(self, epoch, logs=None):
        self.result["epochs"].append(epoch)
        # The optimizer keeps the rate as written (one worker's); each update applies it x the plan's factor.
        written = float(self.model.optimizer.learning_rate.numpy())
        self.result["written_rates"].append(written)
        self.result["rates"].append(written * self.model.kscale_plan.lr_factor)

    def on_epoch_end(self, epoch, logs=None):
        if how == "backup" and phase == 1 and epoch == 1:
            self.dump()
            os._exit(3)  # every worker: a killed job (a lone multi-worker survivor would wait forever)

    def dump(self):
        self.result["workers"] = self.model.kscale_plan.num_workers
        slots = self.model.optimizer.variables[1:]
        self.result["end_slots"] = float(sum(np.abs(v.numpy()).sum() for v in slots))
        self.result["weights"] = [w.tolist() for w in self.model.get_weights()]
        with open(os.path.join(workdir, f"phase{phase}.{rank}.json"), "w") as f:
            json.dump(self.result, f)


probe = Probe()
if how == "checkpoint" and phase == 2:
    model = tf.keras.models.load_model(checkpoint.format(epoch=2))
else:
    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(8, activation="tanh", input_shape=(5,)), tf.keras.layers.Dense(1)]
    )
    model.compile(optimizer=tf.keras.optimizers.Adam(LR), loss="mse")
model = kscale.distribute(model, print_plan=False)
callbacks = [probe]
if how == "backup":
    callbacks.insert(0, tf.keras.callbacks.BackupAndRestore(os.path.join(workdir, "backup")))
elif phase == 1:
    callbacks.insert(0, tf.keras.callbacks.ModelCheckpoint(checkpoint))
model.fit(
    x, y, batch_size=BATCH, epochs=EPOCHS if phase == 2 or how == "backup" else 2, verbose=0,
    callbacks=callbacks, initial_epoch=2 if how == "checkpoint" and phase == 2 else 0,
)  # fmt: skip
probe.dump()
