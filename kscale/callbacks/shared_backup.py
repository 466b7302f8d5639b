"""Run Keras 3's BackupAndRestore in a job: every process restores, the chief writes, whole (backup_journal)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import weakref
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from kscale import _keras_private, checkpoint_io, log, preemption
from kscale.callbacks import backup_journal
from kscale.errors import BackendError

SCRATCH_PREFIX = "kscale-backup-"
#: Beside the chief's backup: the job that wrote it (its processes, its steps an epoch), to say on resume
#: what another job does differently.
JOB_RECORD = "kscale_job.json"


def scratch_folder() -> str:
    """A new folder for this process's own backup, named by host and process; first, the folders of this
    host's processes that no longer run are deleted: a worker killed (a preemption, SIGKILL) runs no
    finalizer, and each kill left its backup (weights and optimizer state) in the temporary folder."""
    root, host = tempfile.gettempdir(), socket.gethostname()
    mine = f"{SCRATCH_PREFIX}{host}-"
    for entry in os.scandir(root):
        pid = entry.name[len(mine) :].split("-")[0]
        if entry.name.startswith(mine) and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{mine}{os.getpid()}-")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class SharedBackup(keras.callbacks.Callback):
    """The user's `keras.callbacks.BackupAndRestore`, for every process of a job.

    Keras 3's callback knows one process: run on every process, each would create, write and delete the
    one backup folder at once. Here the user's object restores on every process (from the chief's backup,
    which every process must see: a shared folder or a gs:// path) and writes on the chief alone. Every
    other process runs a copy that writes to a folder of its own, deleted at the end: its
    `model.save_weights` still takes part where saving is collective (JAX, tf.distribute), and kscale's
    save keeps the chief's copy only. The chief writes each backup whole (backup_journal), also in a job of
    one process.

    `gather(values)`: every process's values, one row per process (the backend's); `barrier()`: the backend's.
    """

    def __init__(
        self,
        backup: Any,
        is_chief: bool,
        gather: Callable[[np.ndarray], np.ndarray],
        barrier: Callable[[], None],
    ) -> None:
        super().__init__()
        self.backup = backup
        self.is_chief = is_chief
        self._gather = gather
        self._barrier = barrier
        self._scratch: str | None = None
        #: This job as JOB_RECORD holds it, set when training begins (Keras calls on_train_begin first).
        self._job_record = json.dumps({"processes": 1, "steps_per_epoch": None})
        self._writer = backup
        self._journaled = is_chief and backup_journal.journaled(backup)
        if self._journaled:
            self._writer = backup_journal.staged_writer(backup)
        if not is_chief:
            self._scratch = scratch_folder()
            # Also when fit ends on an error (Keras then skips on_train_end).
            weakref.finalize(self, shutil.rmtree, self._scratch, ignore_errors=True)
            self._writer = keras.callbacks.BackupAndRestore(
                self._scratch,
                save_freq=backup.save_freq,
                double_checkpoint=getattr(backup, "double_checkpoint", False),
                delete_checkpoint=True,
            )

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        self.backup.set_model(model)
        self._writer.set_model(model)

    def set_params(self, params: Any) -> None:
        super().set_params(params)
        self.backup.set_params(params)
        self._writer.set_params(params)

    def on_train_begin(self, logs: Any = None) -> None:
        if self._journaled:
            backup_journal.recover(self.backup.backup_dir)
        self._barrier()  # the chief's recovery done before any process looks
        job = {
            "processes": self._check_every_process_sees_the_backup(),
            "steps_per_epoch": self.params.get("steps"),
            "save_freq": self.backup.save_freq,
        }
        self._job_record = json.dumps(job)
        self.backup.on_train_begin(logs)  # Keras' own restore, on every process, from the same files
        self._say_what_changed(job)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        # A backup inside the first epoch after a restore names that epoch, not 0 (_keras_private).
        _keras_private.backup_in_epoch(self._writer, epoch)
        self._writer.on_epoch_begin(epoch, logs)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._writer.on_train_batch_end(batch, logs)
        if preemption.backs_up_inside_an_epoch(self.backup):  # no batch writes a backup otherwise
            self._commit()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._writer.on_epoch_end(epoch, logs)
        self._commit()

    def _commit(self) -> None:
        if self._journaled:
            backup_journal.commit_if_staged(self.backup, self._writer, beside={JOB_RECORD: self._job_record})

    def _say_what_changed(self, now: dict) -> None:
        """On the chief, where this job (`now`) resumes a backup written inside an epoch, or one that another
        number of processes wrote: say so."""
        path = os.path.join(self.backup.backup_dir, JOB_RECORD)
        if not (self.is_chief and self._journaled and os.path.exists(path)):
            return
        with open(path) as f:
            wrote = json.load(f)
        self._say_where_it_resumes(wrote.get("save_freq", "epoch"))
        if wrote["processes"] == now["processes"]:
            return
        steps = ""
        if wrote["steps_per_epoch"] and now["steps_per_epoch"]:
            steps = f"; an epoch has {now['steps_per_epoch']} steps (it had {wrote['steps_per_epoch']})"
        log.chief(
            f"BackupAndRestore: resuming a backup that {wrote['processes']} process(es) wrote, on "
            f"{now['processes']}: the learning rate and the data's shards are this job's{steps}; the epochs "
            "left run as one process at this job's global batch would",
            self.is_chief,
        )

    def _say_where_it_resumes(self, save_freq: Any) -> None:
        """Where the backup was written at a batch's end (`save_freq`, the writer's, is a number of batches):
        Keras starts that epoch again from its first batch, with the weights trained after that batch."""
        if save_freq == "epoch":
            return
        position = _keras_private.backup_position(self.backup)
        if position is None:
            return
        epoch, batch = position
        log.chief(
            f"BackupAndRestore: resuming a backup written after batch {batch + 1} of epoch {epoch + 1} "
            f"(save_freq={save_freq}): Keras starts epoch {epoch + 1} again from its first batch with the "
            "weights trained after that batch, so its first batches are trained twice and the run is not "
            "the one that was never stopped; save_freq='epoch' resumes exactly",
            self.is_chief,
        )

    def on_train_end(self, logs: Any = None) -> None:
        # The chief deletes the backup (delete_checkpoint) before any process leaves fit.
        if self.is_chief:
            self.backup.on_train_end(logs)
        self._barrier()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _check_every_process_sees_the_backup(self) -> int:
        """Raises unless every process sees the same backup files; returns how many processes there are."""
        paths = _keras_private.backup_files(self.backup)
        seen = self._gather(np.asarray([checkpoint_io.exists(p) for p in paths], np.float32))
        if not np.all(seen == seen[0]):
            missing = [rank for rank, row in enumerate(seen) if not np.array_equal(row, seen[0])]
            raise BackendError(
                f"BackupAndRestore: the backup in {self.backup.backup_dir!r} is not the same for every "
                f"process (process(es) {missing} see other files than process 0), so they would resume from "
                "different epochs. Every process restores the chief's backup: put backup_dir on a file "
                "system all of them see (a shared folder, or gs://...)."
            )
        return len(seen)
