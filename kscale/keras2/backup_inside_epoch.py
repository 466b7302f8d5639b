"""tf.keras' `BackupAndRestore(save_freq=N)` in a job: a backup written inside an epoch resumes at the batch
after it, as if the job had never stopped.

tf.keras restores such a backup's step, and fit runs that epoch's remaining steps, but on the epoch's data
from its first batch (a new iterator) and with the epoch's metrics from zero: the epoch's first batches are
trained twice, its last ones never, and every later epoch of a dataset read as one stream (a strategy's,
kscale's tf_data) starts at another batch. Here, beside each such backup, the chief writes the epoch's
metric states combined over every replica (RECORD, atomically through gfile). A fit that tf.keras resumes
at step k of an epoch first reads the epoch's first k batches through the model's test step (nothing is
trained; the data goes on where it was, and the metrics are built, as tf.keras builds them in the first
step), then sets the metric states from the record: weights, History and evaluate are those of the run
never stopped. Where the record is not the backup's, the chief says what differs: a loss between the backup
and the record (the batches are read again all the same: the weights go on as never stopped, the epoch's
metrics count its batches after the backup only); a job of another number of processes or of steps an
epoch whose batches end no batch of this job's (tf.keras counts the backup's step in this job's batches:
not the samples the backup had trained); compile's steps_per_execution > 1 (tf.keras resumes inside the
backup's last execution). A job of another number of processes or global batch (array data) where one of
its batches ends the backup's samples (kscale/epoch_position.py) resumes after that batch instead: tf.keras
is told it before fit starts, and the rest of the epoch is one process's at this job's global batch.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import tensorflow as tf

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
from kscale.metric_states import state_variables

#: Beside the backup: the epoch, batch and metric states of the last backup written inside an epoch.
RECORD = "kscale_inside_epoch.json"


class ResumeInsideEpoch(tf.keras.callbacks.Callback):
    """Runs after the user's `BackupAndRestore` (`backup`), on every worker of the job (`backend`)."""

    def __init__(self, backup: Any, backend: Any) -> None:
        super().__init__()
        self.backup = backup
        self.backend = backend
        self._path = os.path.join(os.fspath(backup.backup_dir), RECORD)
        #: Batches since the last backup, counted as tf.keras counts them (on, across epochs), on every
        #: worker: under Horovod the chief alone runs the backup's own hooks.
        self._since_backup = 0
        self._epoch = 0
        self._epoch_begins = False
        #: The batch of the epoch under way after which the last backup was written (None: none yet).
        self._backed_up_after: int | None = None
        self._record: dict | None = None
        #: The batch of this job after which the restored backup's epoch goes on (None: not the record's).
        self._goes_on: int | None = None

    def on_train_begin(self, logs: Any = None) -> None:
        self._since_backup = 0
        self._record = None
        if checkpoint_io.exists(self._path):
            with tf.io.gfile.GFile(self._path) as f:
                self._record = json.loads(f.read())
        # Read before fit starts: tf.keras sets the restored batch anew at each batch's beginning.
        self._goes_on = self._goes_on_after()
        if self._goes_on is not None and self._goes_on != self._record["batch"]:  # its samples end elsewhere
            _keras_private.resume_after_batch(self.model, self._goes_on)
        backup_clock.start(self.backup)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._epoch, self._epoch_begins, self._backed_up_after = epoch, True, None

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._epoch_begins and batch > 0:  # tf.keras resumed this epoch at `batch`
            self._resume_at(batch)
        self._epoch_begins = False

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._since_backup += 1
        if self._since_backup < self.backup.save_freq:
            return
        self._since_backup = 0  # the backup was written after this batch, on every worker alike
        variables, reductions = state_variables(self.model)
        states = self.backend.combined_metric_states(variables, reductions)
        self._backed_up_after = batch
        if self.backend.is_chief:
            record = {
                **self._job(),
                "epoch": int(self._epoch),
                "batch": int(batch),
                "metric_states": [np.asarray(state).tolist() for state in states],
            }
            checkpoint_io.atomic_save(self._path, lambda path: _write(path, record), may_be_folder=False)
        if paced := backup_clock.pace_next(self.backup, self.backup.save_freq, self.backend.gather):
            self.backup.save_freq = paced

    def resumes_after(self, batch: int) -> bool:
        """Whether a backup was written after `batch` of the epoch under way (it resumes at the next batch:
        preemption's stop then ends the job there)."""
        return self._backed_up_after == batch

    def on_train_end(self, logs: Any = None) -> None:
        if self.backend.is_chief and self.backup.delete_checkpoint and checkpoint_io.exists(self._path):
            tf.io.gfile.remove(self._path)

    def _job(self) -> dict:
        plan = getattr(self.model, "kscale_plan", None)
        return epoch_position.job_record(self.backend.num_workers, self.params.get("steps"), plan)

    def _same_job(self, record: dict) -> bool:
        job = self._job()
        return (record.get("processes"), record.get("steps_per_epoch")) == (
            job["processes"],
            job["steps_per_epoch"],
        )

    def _goes_on_after(self) -> int | None:
        """The batch of this job after which the record's epoch goes on where the backup tf.keras restored is
        the record's (kscale/epoch_position.py: the same batch in a job like the writer's, or the one that
        ends the same samples), or None."""
        record = self._record or {}
        if not {"epoch", "batch", "processes", "steps_per_epoch"} <= record.keys():
            return None
        if _keras_private.restored_backup_position(self.model) != (record["epoch"], record["batch"]):
            return None
        return epoch_position.same_samples_batch(record, self._job(), record["batch"])

    def _resume_at(self, step: int) -> None:
        """tf.keras resumed the epoch at `step` on its data from the first batch: read `step` batches first,
        then set the epoch's metric states where the record is the backup's (agreed by every worker)."""
        record = self._record or {}
        ours = record.get("epoch") == self._epoch and self._goes_on == step - 1
        agreement.check_same_backup_record(self.backend.gather, ours, self.backup.backup_dir, RECORD)
        model_steps.read_before_training(self.model, step, lambda: self._restore(step, ours))

    def _restore(self, step: int, ours: bool) -> None:
        """After the batches read again (the metrics built): the epoch's metric states from the record where
        it is `ours` (the backup's), and the chief says where the job goes on."""
        self.model.reset_metrics()
        record = self._record or {}
        same_job = self._same_job(record)
        where = f"BackupAndRestore: epoch {self._epoch + 1} resumed at batch {step + 1}"
        variables, reductions = state_variables(self.model)
        states = record.get("metric_states") if ours else None
        if states is not None and [np.shape(s) for s in states] == [tuple(v.shape) for v in variables]:
            self.backend.restore_metric_states(variables, states, reductions)
            by, otherwise = "", ", as if the job had never stopped"
            if not same_job:
                job = self._job()
                by = (
                    f" by {record['processes']} process(es) at {epoch_position.step_size(record)}, on "
                    f"{job['processes']} at {epoch_position.step_size(job)}, after the same samples"
                )
                otherwise = ", as one process at this job's global batch would"
            resumed = plan_notes.resumed_inside_an_epoch(self.model, "tf.keras' backup", otherwise)
            log.chief(
                f"{where}, after the backup written after batch {record['batch'] + 1}{by} (its first {step} "
                f"batches are read again, not trained; its metrics go on from the backup's){resumed}",
                self.backend.is_chief,
            )
            return
        if record and not same_job:
            said = (
                f"WARNING: {where}, from a backup that a job of {record.get('processes')} process(es) at "
                f"{record.get('steps_per_epoch')} steps an epoch wrote (this one: {self._job()['processes']}, "
                f"{self._job()['steps_per_epoch']}), whose batches end no batch of this job's (or whose data "
                "held its batch): tf.keras counts the backup's step in this job's batches, "
                f"so the epoch's first {step} batches are read again, not trained, but they are not the samples "
                "the backup had trained, and the epoch's metrics count its batches from here only. Resume on "
                "as many processes, or back up at epochs' ends (save_freq='epoch') to change their number"
            )
        elif record.get("epoch") == self._epoch and record.get("batch", -1) > step - 1:
            said = (
                f"WARNING: {where} by tf.keras, but the backup was written after batch {record['batch'] + 1} "
                "(compile's steps_per_execution > 1: tf.keras resumes after the first batch of the backup's "
                "last execution): that epoch's batches in between are trained twice, so the run is not the "
                "one never stopped. Use steps_per_execution=1 with save_freq=N, or save_freq='epoch'"
            )
        else:
            said = (
                f"{where} without the epoch's metric states beside the backup (none, or older ones: a loss "
                f"between the backup and {RECORD}): its first {step} batches are read again, not trained, so "
                "the weights go on as if never stopped, but the epoch's metrics count only its batches after "
                "the backup"
            )
        log.chief(said, self.backend.is_chief)


def _write(path: str, record: dict) -> None:
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(record))
