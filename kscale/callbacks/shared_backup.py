"""Run Keras 3's BackupAndRestore in a job: every process restores, the chief writes, whole (backup_journal),
and a backup written inside an epoch resumes at the batch after it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import weakref
from typing import Any

import keras
import numpy as np

from kscale import (
    _keras_private,
    agreement,
    backup_clock,
    checkpoint_io,
    epoch_position,
    log,
    model_steps,
    plan_notes,
)
from kscale.callbacks import backup_journal
from kscale.errors import BackendError
from kscale.metric_states import state_variables

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
    one process, and where its folder is local or shared (not gs://) commits it there off the training
    thread (backup_journal.Commits: its Keras writes into a scratch folder first).

    A backup written inside an epoch (`save_freq=N`) resumes at the batch after it, as if never stopped:
    Keras alone starts that epoch again from its first batch with the later weights, training its first
    batches twice. Beside such a backup the job record keeps the epoch's metric states (combined over
    every replica); resumed by the same number of processes at the same steps an epoch, the epoch's
    batches up to the backup's are read again without training (model_steps.skip_training), so the data
    goes on where it was, and the metrics go on from the record: weights, History and evaluate are the
    uninterrupted run's. Resumed by another number of processes (array data), the batches read again are
    this job's up to the same samples (kscale/epoch_position.py): the rest of the epoch is one process's at
    this job's global batch from the backup on. Elsewhere Keras' own restart of the epoch stands, and the
    chief says so.
    """

    def __init__(self, backup: Any, backend: Any) -> None:
        super().__init__()
        self.backup = backup
        self.backend = backend
        self.is_chief = backend.is_chief
        self._scratch: str | None = None
        #: This job as JOB_RECORD holds it, set when training begins (Keras calls on_train_begin first).
        self._job: dict = {"processes": 1, "steps_per_epoch": None}
        #: Where this fit resumes inside an epoch: (epoch, the backup's batch, the epoch's metric states).
        self._resume: tuple[int, int, list] | None = None
        #: The batch of the epoch under way after which the last backup was written (None: none yet).
        self._backed_up_after: int | None = None
        self._writer = backup
        self._journaled = self.is_chief and backup_journal.journaled(backup)
        self._commits: backup_journal.Commits | None = None
        if self._journaled or not self.is_chief:
            self._scratch = scratch_folder()
            # Also when fit ends on an error (Keras then skips on_train_end).
            weakref.finalize(self, shutil.rmtree, self._scratch, ignore_errors=True)
        if self._journaled:  # written here, committed into the backup folder off the training thread
            self._writer = backup_journal.staged_writer(backup, self._scratch)
            self._commits = backup_journal.Commits(backup, self._writer)
        if not self.is_chief:
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
        self.backend.barrier()  # the chief's recovery done before any process looks
        processes = self._check_every_process_sees_the_backup()
        plan = getattr(self.model, "kscale_plan", None)
        self._job = {
            **epoch_position.job_record(processes, self.params.get("steps"), plan),
            "save_freq": self.backup.save_freq,
        }
        written = self._written_record()  # before the restore: Keras' own may delete nothing, but reads
        self.backup.on_train_begin(logs)  # Keras' own restore, on every process, from the same files
        self._resume = self._resumed_inside_an_epoch(written)
        if written is not None:
            self._say_what_changed(written)
        backup_clock.start(self.backup)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        # A backup inside the first epoch after a restore names that epoch, not 0 (_keras_private).
        _keras_private.backup_in_epoch(self._writer, epoch)
        self._writer.on_epoch_begin(epoch, logs)
        if self._resume is None or self._resume[0] != epoch:
            return
        _, batch, states = self._resume
        variables, reductions = state_variables(self.model)
        self.backend.restore_metric_states(variables, states, reductions)  # after Keras reset them
        _keras_private.backup_counts_from(self._writer, batch)
        model_steps.skip_training(self.model, True)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._resume is not None:  # a batch the backup had trained: read again, not trained
            if batch >= self._resume[1]:
                self._resume = None
                model_steps.skip_training(self.model, False)
            return
        self._writer.on_train_batch_end(batch, logs)
        if _keras_private.backup_written_at_this_batch(self._writer):  # the same batch on every process
            self._backed_up_after = batch
            variables, reductions = state_variables(self.model)
            states = self.backend.combined_metric_states(variables, reductions)
            position = _keras_private.backup_position(self._writer) if self._journaled else None
            inside = None
            if position is not None:
                inside = {
                    "epoch": position[0],
                    "batch": position[1],
                    "metric_states": [np.asarray(state).tolist() for state in states],
                }
            self._commit(inside)
            if paced := backup_clock.pace_next(self.backup, self._writer.save_freq, self.backend.gather):
                self.backup.save_freq = self._writer.save_freq = paced

    def resumes_after(self, batch: int) -> bool:
        """Whether a backup written after `batch` of the epoch under way resumes at the next batch, as if
        never stopped (by a job like this one: preemption's stop then ends the job there)."""
        return self._backed_up_after == batch and backup_journal.journaled(self.backup)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._backed_up_after = None
        if self._resume is not None:  # the epoch ended before the backup's batch: train the next one
            self._resume = None
            model_steps.skip_training(self.model, False)
        self._writer.on_epoch_end(epoch, logs)
        self._commit()

    def _commit(self, inside_epoch: dict | None = None) -> None:
        """The staged backup committed with this job's record, and the epoch's position and metric states
        where it was written `inside_epoch`."""
        if self._commits is not None:
            record = self._job if inside_epoch is None else {**self._job, "inside_epoch": inside_epoch}
            self._commits.commit(beside={JOB_RECORD: json.dumps(record)})

    def _written_record(self) -> dict | None:
        """The job record beside the backup (JOB_RECORD), which every process reads, or None."""
        path = os.path.join(self.backup.backup_dir, JOB_RECORD)
        if not (backup_journal.journaled(self.backup) and os.path.exists(path)):
            return None
        with open(path) as f:
            return json.load(f)

    def _resumed_inside_an_epoch(self, written: dict | None) -> tuple[int, int, list] | None:
        """Where the restored backup was written inside an epoch by a job like this one: that epoch, its
        batch, the epoch's metric states; agreed by every process (one gather)."""
        found = None
        inside = (written or {}).get("inside_epoch")
        position = _keras_private.backup_position(self.backup) if inside else None
        variables, _ = state_variables(self.model)
        if (
            position is not None
            and position == (inside["epoch"], inside["batch"])
            and [np.shape(state) for state in inside["metric_states"]]
            == [tuple(variable.shape) for variable in variables]
        ):
            batch = epoch_position.same_samples_batch(written, self._job, position[1])
            if batch is not None:
                found = (position[0], batch, inside["metric_states"])
        agreement.check_same_backup_record(
            self.backend.gather, found is not None, self.backup.backup_dir, f"job record ({JOB_RECORD})"
        )
        return found

    def _say_what_changed(self, wrote: dict) -> None:
        """On the chief, where this job resumes a backup written inside an epoch, or one that another
        number of processes wrote (`wrote`: its job record): say so."""
        now = self._job
        self._say_where_it_resumes(wrote)
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

    def _say_where_it_resumes(self, wrote: dict) -> None:
        """Where the backup was written at a batch's end (the writer's `save_freq` a number of batches): the
        epoch goes on after the backup's samples, or, where this job cannot (no batch of it ends them, or
        no metric states beside the backup), Keras starts that epoch again from its first batch with the
        later weights."""
        save_freq = wrote.get("save_freq", "epoch")
        position = _keras_private.backup_position(self.backup)
        if save_freq == "epoch" or position is None:
            return
        epoch, batch = position
        where = (
            f"resuming a backup written after batch {batch + 1} of epoch {epoch + 1} (save_freq={save_freq})"
        )
        if self._resume is not None:
            goes_on, same, otherwise = self._resume[1], "", ", as if the job had never stopped"
            if goes_on != batch:
                same, otherwise = (
                    " after the same samples",
                    ", as one process at this job's global batch would",
                )
                where += (
                    f" by {wrote['processes']} process(es) at {epoch_position.step_size(wrote)}, on "
                    f"{self._job['processes']} at {epoch_position.step_size(self._job)}"
                )
            unlike = plan_notes.resumed_inside_an_epoch(self.model, "Keras' backup", otherwise)
            log.chief(
                f"BackupAndRestore: {where}: epoch {epoch + 1} goes on at batch {goes_on + 2}{same} (its first "
                f"{goes_on + 1} batches are read again, not trained; its metrics go on from the backup's){unlike}",
                self.is_chief,
            )
            return
        log.chief(
            f"BackupAndRestore: {where}, by another job (processes, steps an epoch) whose batch ends no batch "
            f"of this one's (or whose data held its batch), or without the epoch's metrics beside it: Keras "
            f"starts epoch {epoch + 1} again from its first batch with the weights trained after that batch, "
            "so its first batches are trained twice and the run is not the one that was never stopped; "
            "save_freq='epoch', or the same job, resumes exactly",
            self.is_chief,
        )

    def on_train_end(self, logs: Any = None) -> None:
        # The chief's last backup committed, then deleted (delete_checkpoint) before any process leaves fit.
        if self._commits is not None:
            self._commits.wait()
        if self.is_chief:
            self.backup.on_train_end(logs)
        self.backend.barrier()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _check_every_process_sees_the_backup(self) -> int:
        """Raises unless every process sees the same backup files; returns how many processes there are."""
        paths = _keras_private.backup_files(self.backup)
        seen = self.backend.gather(np.asarray([checkpoint_io.exists(p) for p in paths], np.float32))
        if not np.all(seen == seen[0]):
            missing = [rank for rank, row in enumerate(seen) if not np.array_equal(row, seen[0])]
            raise BackendError(
                f"BackupAndRestore: the backup in {self.backup.backup_dir!r} is not the same for every "
                f"process (process(es) {missing} see other files than process 0), so they would resume from "
                "different epochs. Every process restores the chief's backup: put backup_dir on a file "
                "system all of them see (a shared folder, or gs://...)."
            )
        return len(seen)
