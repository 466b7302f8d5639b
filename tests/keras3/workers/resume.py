"""Keras 3: train 4 epochs with keras.callbacks.BackupAndRestore; optionally die after epoch 2; dump what
each process ran, restored and ended with.

resume.py MODE WORKDIR [--crash-after-epochs K] [--backup-dir DIR]
  MODE reference  plain Keras, one process, batch 2b, lr 2η, never interrupted
  MODE plain      plain Keras, one process, batch b, lr η (resumes from a backup it finds, as Keras does)
  MODE kscale     kscale.distribute, batch b and lr η per replica, as launched (one process, or several
                  under `kscale run -np N`)
  MODE continue   plain Keras, one process, batch b, lr η, from the backup in WORKDIR/backup that
                  --backup-processes P wrote inside an epoch: its weights and optimizer loaded, that
                  epoch's samples after the backup's trained, then the epochs after it (one process going
                  on from the backup's samples)
With --crash-after-epochs K every process exits with status 3 right after epoch K's backup (a lone
survivor would wait forever in the next collective): a killed job.
With --notice-at-step S the last process sends itself SIGTERM, a preemption notice, after its step S
(counted from 1 over all epochs), once (WORKDIR/noticed.S says it did); every process writes what it
backed up at each epoch's end.
With --notice-function-at-step S the last process's `distribute(preemption_notice=...)` function says
"preempted" from its step S on, in this run of the job only (not after a restart).
With --await-notice-at-step S every process waits after its step S until it has a notice (the test sends
SIGTERM to `kscale run`, which passes it on).
With --kill-at-step S (repeatable) the last process kills itself with SIGKILL after its step S, once for
each S (WORKDIR/killed.S says it did): a loss without notice.
With --save-freq N the backup is written every N batches (BackupAndRestore's save_freq), not each epoch.
With --backup-minutes M it is written every M minutes (distribute's backup_minutes), and with
--step-seconds T the last process sleeps T seconds after each of its steps (the slowest sets the pace).
With --pydataset fit's data is a keras.utils.PyDataset of the batches (in order), not arrays and a batch_size;
with --dataset a tf.data.Dataset of them.
With --kill-in-save weights|commit the chief kills itself with SIGKILL inside epoch 1's backup, once
(WORKDIR/killed): after the backup's weights file is written and before its epoch file is (`weights`), or
once the backup is committed, before its files are moved into the backup folder (`commit`).
"""

import argparse
import json
import os
import signal
import time

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["reference", "plain", "kscale", "continue"])
parser.add_argument("workdir")
parser.add_argument("--crash-after-epochs", type=int, default=0)
parser.add_argument("--backup-dir", help="default: WORKDIR/backup")
parser.add_argument("--notice-at-step", type=int, default=0)
parser.add_argument("--await-notice-at-step", type=int, default=0)
parser.add_argument("--notice-function-at-step", type=int, default=0)
parser.add_argument("--kill-at-step", type=int, action="append", default=[])
parser.add_argument("--save-freq", type=int, default=0)
parser.add_argument("--backup-minutes", type=float)
parser.add_argument("--step-seconds", type=float, default=0.0)
parser.add_argument("--kill-in-save", choices=["weights", "commit"])
parser.add_argument("--shuffle", action="store_true", help="fit's shuffle (default False)")
parser.add_argument("--backup-processes", type=int, default=0, help="MODE continue: the backup's job")
parser.add_argument("--pydataset", action="store_true", help="the data as a PyDataset of batches")
parser.add_argument("--dataset", action="store_true", help="the data as a tf.data.Dataset of batches")
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


def preempted() -> bool:
    """The script's own notice (--notice-function-at-step): True from step S on, on the last process, until
    the job is started again (another process id)."""
    given = os.path.join(args.workdir, "notice_given")
    if os.path.exists(given):
        with open(given) as f:
            return f.read() == str(os.getpid())
    step = int(np.asarray(model.optimizer.iterations))
    if rank != kscale.size() - 1 or step < args.notice_function_at_step:
        return False
    print(f"rank {rank}: preemption_notice() says preempted at step {step}", flush=True)
    with open(given, "w") as f:
        f.write(str(os.getpid()))
    return True


if args.mode == "kscale":
    notice = {"preemption_notice": preempted} if args.notice_function_at_step else {}
    model = kscale.distribute(model, print_plan=False, backup_minutes=args.backup_minutes, **notice)


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

    def on_train_batch_end(self, batch, logs=None):
        step, last = int(np.asarray(self.model.optimizer.iterations)), rank == kscale.size() - 1
        if last and args.step_seconds:
            time.sleep(args.step_seconds)
        noticed = os.path.join(args.workdir, f"noticed.{step}")
        if args.notice_at_step and step == args.notice_at_step and last and not os.path.exists(noticed):
            open(noticed, "w").close()  # once: a job resumed before this step trains it again
            print(f"rank {rank}: preemption notice after step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
        killed = os.path.join(args.workdir, f"killed.{step}")
        if step in args.kill_at_step and last and not os.path.exists(killed):
            open(killed, "w").close()
            print(f"rank {rank}: killing itself after step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if args.await_notice_at_step and step == args.await_notice_at_step:
            print(f"rank {rank}: awaiting a notice after step {step}", flush=True)
            notice = signal.getsignal(signal.SIGTERM).__self__  # kscale's, listening while fit runs
            deadline = time.monotonic() + 120
            while not notice.received() and time.monotonic() < deadline:
                time.sleep(0.05)

    def on_epoch_end(self, epoch, logs=None):
        self.ran.append(epoch)
        dying = args.crash_after_epochs and epoch + 1 == args.crash_after_epochs
        if args.notice_at_step or args.await_notice_at_step or args.notice_function_at_step or dying:
            with open(os.path.join(args.workdir, f"backed_up.{rank}.json"), "w") as f:
                json.dump(state(self.model), f)
        if dying:
            print(f"rank {rank}: dying after epoch {epoch + 1}, as asked", flush=True)
            os._exit(3)


def kill_in_save(point: str) -> None:
    """SIGKILL to this process at `point` of the backup written after epoch 1 (the second), once."""
    from kscale.callbacks import backup_journal

    killed = os.path.join(args.workdir, "killed")

    def kill(where: str) -> None:
        if epochs.ran == [0] and not os.path.exists(killed):
            open(killed, "w").close()
            print(f"rank {rank}: killing itself {where}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    if point == "weights":
        save_weights = model.save_weights

        def saved_then_killed(filepath, *a, **k):
            save_weights(filepath, *a, **k)
            kill("with the backup's weights written, its epoch not")

        object.__setattr__(model, "save_weights", saved_then_killed)
    else:
        replace = os.replace

        def replace_or_kill(src, dst, *a, **k):
            if os.path.basename(os.path.dirname(src)) == backup_journal.JOURNAL:
                kill("with the backup committed, its files not moved in")
            return replace(src, dst, *a, **k)

        os.replace = replace_or_kill


def continued() -> None:
    """MODE continue: one process, plain Keras, going on from the samples of the epoch after the backup's
    (Keras' training metadata: the epoch, and the batch of the backup's job at BATCH a process); writes
    the result of the epochs after that one, whose History is whole."""
    backup = os.path.join(args.workdir, "backup")
    with open(os.path.join(backup, "training_metadata.json")) as f:
        metadata = json.load(f)
    epoch, done = metadata["epoch"], (metadata["batch"] + 1) * BATCH * args.backup_processes
    model.optimizer.build(model.trainable_variables)
    model.load_weights(os.path.join(backup, "latest.weights.h5"))
    model.fit(x[done:], y[done:], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    later = model.fit(
        x, y, batch_size=BATCH, epochs=EPOCHS, initial_epoch=epoch + 1, shuffle=False, verbose=0
    )
    result = {
        "final": [np.asarray(w).tolist() for w in model.get_weights()],
        "iterations": int(np.asarray(model.optimizer.iterations)),
        "learning_rate": applied_rate(model),
        "history": {"epoch": later.epoch, **later.history},
    }
    with open(os.path.join(args.workdir, "continued.json"), "w") as f:
        json.dump(result, f)


if args.mode == "continue":
    continued()
    raise SystemExit(0)
epochs = Epochs()
if args.kill_in_save and rank == 0:
    kill_in_save(args.kill_in_save)
backup = keras.callbacks.BackupAndRestore(
    args.backup_dir or os.path.join(args.workdir, "backup"), save_freq=args.save_freq or "epoch"
)


class Batches(keras.utils.PyDataset):
    """x and y in batches of `size` rows, in order (--pydataset): data that holds its batch."""

    def __init__(self, size):
        super().__init__()
        self.size = size

    def __len__(self):
        return SAMPLES // self.size

    def __getitem__(self, index):
        rows = slice(index * self.size, (index + 1) * self.size)
        return x[rows], y[rows]


size = BATCH * (2 if reference else 1)
data = {"x": Batches(size)} if args.pydataset else {"x": x, "y": y, "batch_size": size}
if args.dataset:
    import tensorflow as tf

    data = {"x": tf.data.Dataset.from_tensor_slices((x, y)).batch(size)}
history = model.fit(
    **data,
    epochs=EPOCHS,
    shuffle=args.shuffle,
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
    "save_freq": backup.save_freq,  # where it backs up every M minutes: the pace's, agreed
    "history": {"epoch": history.epoch, **history.history},
}
with open(os.path.join(args.workdir, f"result.{rank}.json"), "w") as f:
    json.dump(result, f)
