"""Keras 3: train 4 epochs with keras.callbacks.BackupAndRestore; optionally die after epoch 2; dump what
each process ran, restored and ended with.

resume.py MODE WORKDIR [--crash-after-epochs K] [--backup-dir DIR]
  MODE reference  plain Keras, one process, batch 2b, lr 2η, never interrupted
  MODE kscale     kscale.distribute, batch b and lr η per replica, as launched (one process, or several
                  under `kscale run -np N`)
With --crash-after-epochs K every process exits with status 3 right after epoch K's backup (a lone
survivor would wait forever in the next collective): a killed job.
"""

import argparse
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["reference", "kscale"])
parser.add_argument("workdir")
parser.add_argument("--crash-after-epochs", type=int, default=0)
parser.add_argument("--backup-dir", help="default: WORKDIR/backup")
args = parser.parse_args()

import keras  # noqa: E402  (after kscale: it joins the job before the framework starts)
import numpy as np  # noqa: E402

import kscale  # noqa: E402

BATCH, LR, EPOCHS, SAMPLES = 4, 0.02, 4, 64
rank = kscale.rank()
rng = np.random.default_rng(0)
x = rng.normal(size=(SAMPLES, 5)).astype("float32")
y = (x @ rng.normal(size=(5, 1)) + 0.1).astype("float32")

kscale.set_seed(1)
model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
reference = args.mode == "reference"
# Momentum: the optimizer has state of its own, which the backup must carry over too.
model.compile(optimizer=keras.optimizers.SGD(LR * (2 if reference else 1), momentum=0.9), loss="mse")
if not reference:
    model = kscale.distribute(model, print_plan=False)


def applied_rate(model) -> float:
    """The rate each update applies: the optimizer keeps the rate as written (one worker's), kscale applies
    it times the plan's factor."""
    factor = model.kscale_plan.lr_factor if hasattr(model, "kscale_plan") else 1.0
    return float(np.asarray(model.optimizer.learning_rate)) * factor


def state(model) -> dict:
    """The weights, the optimizer's own variables (step count, rate, momentum) as this process holds them."""
    return {
        "weights": [np.asarray(w).tolist() for w in model.get_weights()],
        # Its step count and momentum (the rate apart: a job on another number of workers scales it).
        "optimizer": [np.asarray(v).tolist() for v in model.optimizer.variables if v.name != "learning_rate"],
        "learning_rate": applied_rate(model),
        "written_rate": float(np.asarray(model.optimizer.learning_rate)),
    }


class Epochs(keras.callbacks.Callback):
    """Runs after BackupAndRestore: sees what it restored when training begins and what it backed up
    when an epoch ends."""

    def __init__(self):
        super().__init__()
        self.ran = []
        self.restored = None

    def on_train_begin(self, logs=None):
        self.restored = state(self.model)

    def on_epoch_end(self, epoch, logs=None):
        self.ran.append(epoch)
        if args.crash_after_epochs and epoch + 1 == args.crash_after_epochs:
            with open(os.path.join(args.workdir, f"backed_up.{rank}.json"), "w") as f:
                json.dump(state(self.model), f)
            print(f"rank {rank}: dying after epoch {epoch + 1}, as asked", flush=True)
            os._exit(3)


epochs = Epochs()
backup = keras.callbacks.BackupAndRestore(args.backup_dir or os.path.join(args.workdir, "backup"))
model.fit(
    x,
    y,
    batch_size=BATCH * (2 if reference else 1),
    epochs=EPOCHS,
    shuffle=False,
    verbose=0,
    callbacks=[backup, epochs],
)
result = {
    "epochs": epochs.ran,
    "final": [np.asarray(w).tolist() for w in model.get_weights()],
    "iterations": int(np.asarray(model.optimizer.iterations)),
    "learning_rate": applied_rate(model),
    "written_rate": float(np.asarray(model.optimizer.learning_rate)),
    "restored": epochs.restored,
}
with open(os.path.join(args.workdir, f"result.{rank}.json"), "w") as f:
    json.dump(result, f)
