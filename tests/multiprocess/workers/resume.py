"""Train 4 epochs with BackupAndRestore; optionally die after epoch 2; dump what each rank ran and ended with.

resume.py MODE WORKDIR [--crash-after-epochs K]
  MODE reference     plain Keras, one process, batch 2b, lr 2η, never interrupted
  MODE single        kscale, one process, batch 2b, lr 2η (nothing to scale)
  MODE mirrored      kscale, MirroredStrategy on 2 logical CPUs, batch b, lr η
  MODE horovod       kscale under horovodrun -np 2, batch b, lr η; rank 1 starts from other weights
  MODE multi_worker  kscale, 2 TF_CONFIG workers, batch b, lr η
  MODE one           kscale, one process, batch b, lr η (a 2-worker job's backup resumed on one)
  MODE continue      plain Keras, one process, batch b, lr η, from the checkpoint in WORKDIR/backup that
                     --backup-processes P workers wrote inside an epoch: that epoch's samples after the
                     backup's trained, then the epochs after it (one process going on from the backup)
With --crash-after-epochs K the chief (every worker under multi_worker, where a lone survivor would wait
forever in the next collective) exits with status 3 right after epoch K's backup: a killed job.
With --notice-at-step S rank --notice-rank (default 1; 0 in one process) sends itself SIGTERM, a preemption
notice, after its step S (counted from 1 over all epochs); every rank writes what it backed up at each
epoch's end. With --save-freq N the backup is written every N batches (BackupAndRestore's save_freq, counted
over all epochs), not each epoch, and each rank writes what it backed up there. With --kill-at-step S the
last rank kills itself with SIGKILL after its step S, once (WORKDIR/killed says it did): a loss without
notice, which `kscale run --max-restarts` starts again with the same arguments. With --backup-minutes M the
backup is written every M minutes (distribute's backup_minutes), and with --step-seconds T the last rank
sleeps T seconds after each of its steps (the slowest sets the pace). With --sequence fit's data is a
keras.utils.Sequence of the batches (in order), not arrays and a batch_size.
"""

import argparse
import json
import os
import signal
import time

parser = argparse.ArgumentParser()
parser.add_argument("mode")
parser.add_argument("workdir")
parser.add_argument("--crash-after-epochs", type=int, default=0)
parser.add_argument("--notice-at-step", type=int, default=0)
parser.add_argument("--notice-rank", type=int, default=1)
parser.add_argument("--save-freq", type=int, default=0)
parser.add_argument("--backup-minutes", type=float)
parser.add_argument("--step-seconds", type=float, default=0.0)
parser.add_argument("--kill-at-step", type=int, default=0)
parser.add_argument("--backup-processes", type=int, default=0, help="MODE continue: the backup's job")
parser.add_argument("--sequence", action="store_true", help="the data as a keras.utils.Sequence of batches")
args = parser.parse_args()

import tensorflow as tf  # noqa: E402

if args.mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

import kscale  # noqa: E402

BATCH, LR, EPOCHS, SAMPLES = 4, 0.02, 4, 64
rank, world_size = kscale.environment.current().rank, kscale.environment.current().world_size
KILLED = os.path.join(args.workdir, "killed")
# The job started again after the kill runs on: it neither kills nor writes what it backed up.
before_the_kill = bool(args.kill_at_step) and not os.path.exists(KILLED)
rng = np.random.default_rng(0)
x = rng.normal(size=(SAMPLES, 5)).astype("float32")
y = (x @ rng.normal(size=(5, 1)) + 0.1).astype("float32")

kscale.set_seed(1 if rank == 0 else 99)  # Horovod's rank 1 differs: restore/broadcast fix it
model = tf.keras.Sequential(
    [tf.keras.layers.Dense(8, activation="tanh", input_shape=(5,)), tf.keras.layers.Dense(1)]
)
one_process = args.mode in ("reference", "single")
# Momentum: the optimizer has state of its own, which the backup must carry over too.
model.compile(optimizer=tf.keras.optimizers.SGD(LR * (2 if one_process else 1), momentum=0.9), loss="mse")
if args.mode not in ("reference", "continue"):
    options = {"backend": "mirrored", "devices": ["CPU:0", "CPU:1"]} if args.mode == "mirrored" else {}
    model = kscale.distribute(model, print_plan=False, backup_minutes=args.backup_minutes, **options)


def state(model) -> dict:
    """The weights and the optimizer's step count, as this rank holds them. (Its momentum slots are made by
    the first step and restored then, so they are not there to compare when training begins; the final
    weights' equality with the uninterrupted run shows them.)"""
    return {
        "weights": [w.tolist() for w in model.get_weights()],
        "optimizer": [int(model.optimizer.iterations.numpy())],
    }


class Epochs(tf.keras.callbacks.Callback):
    """Runs after BackupAndRestore: sees what it restored when training begins and what it backed up
    when an epoch ends."""

    def __init__(self):
        super().__init__()
        self.ran = []
        self.restored = None

    def on_train_begin(self, logs=None):
        self.restored = state(self.model)

    def on_train_batch_end(self, batch, logs=None):
        notified = args.notice_rank if args.mode not in ("reference", "single", "mirrored") else 0
        step = int(self.model.optimizer.iterations.numpy())
        if args.step_seconds and rank == world_size - 1:
            time.sleep(args.step_seconds)
        if args.notice_at_step and step == args.notice_at_step and rank == notified:
            print(f"rank {rank}: preemption notice after step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
        if (args.notice_at_step or before_the_kill) and args.save_freq and step % args.save_freq == 0:
            self.backed_up()
        if before_the_kill and step == args.kill_at_step and rank == world_size - 1:
            open(KILLED, "w").close()
            print(f"rank {rank}: killing itself after step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def backed_up(self):
        with open(os.path.join(args.workdir, f"backed_up.{rank}.json"), "w") as f:
            json.dump(state(self.model), f)

    def on_epoch_end(self, epoch, logs=None):
        self.ran.append(epoch)
        crashes = rank == 0 or args.mode == "multi_worker"
        dying = args.crash_after_epochs and epoch + 1 == args.crash_after_epochs and crashes
        if (args.notice_at_step and not args.save_freq) or dying:
            self.backed_up()
        if dying:
            print(f"rank {rank}: dying after epoch {epoch + 1}, as asked", flush=True)
            os._exit(3)


def continued() -> None:
    """MODE continue: one process, plain tf.keras, going on from the samples of the epoch after the backup's
    (the checkpoint's epoch, and its batch in the backup's job at BATCH a worker); writes the result of
    the epochs after that one, whose History is whole."""
    epoch, batch = tf.Variable(-1, dtype=tf.int64), tf.Variable(-1, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=model, ckpt_saved_epoch=epoch, ckpt_saved_batch=batch)
    folder = os.path.join(args.workdir, "backup", "chief")
    checkpoint.restore(tf.train.latest_checkpoint(folder)).expect_partial()
    epoch, done = int(epoch.numpy()), (int(batch.numpy()) + 1) * BATCH * args.backup_processes
    model.fit(x[done:], y[done:], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    later = model.fit(
        x, y, batch_size=BATCH, epochs=EPOCHS, initial_epoch=epoch + 1, shuffle=False, verbose=0
    )
    result = {
        "final": [w.tolist() for w in model.get_weights()],
        "iterations": int(model.optimizer.iterations.numpy()),
        "history": {"epoch": later.epoch, **later.history},
    }
    with open(os.path.join(args.workdir, "continued.json"), "w") as f:
        json.dump(result, f)


if args.mode == "continue":
    continued()
    raise SystemExit(0)
epochs = Epochs()
backup = tf.keras.callbacks.BackupAndRestore(
    os.path.join(args.workdir, "backup"), save_freq=args.save_freq or "epoch"
)


class Batches(tf.keras.utils.Sequence):
    """x and y in batches of `size` rows, in order (--sequence): data that holds its batch."""

    def __init__(self, size):
        super().__init__()
        self.size = size

    def __len__(self):
        return SAMPLES // self.size

    def __getitem__(self, index):
        rows = slice(index * self.size, (index + 1) * self.size)
        return x[rows], y[rows]


size = BATCH * (2 if one_process else 1)
data = {"x": Batches(size)} if args.sequence else {"x": x, "y": y, "batch_size": size}
history = model.fit(
    **data,
    epochs=EPOCHS,
    shuffle=False,
    verbose=0,
    callbacks=[backup, epochs],
)
result = {
    "epochs": epochs.ran,
    "final": [w.tolist() for w in model.get_weights()],
    "iterations": int(model.optimizer.iterations.numpy()),
    "restored": epochs.restored,
    "save_freq": backup.save_freq,  # where it backs up every M minutes: the pace's, agreed
    "history": {"epoch": history.epoch, **history.history},
}
with open(os.path.join(args.workdir, f"result.{rank}.json"), "w") as f:
    json.dump(result, f)
