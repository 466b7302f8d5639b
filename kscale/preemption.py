"""A preemption notice stops every worker of a job where the user's `BackupAndRestore` has just written a
backup that resumes exactly, with exit status 143: run again, the job resumes there.

Schedulers announce a preemption with SIGTERM (Kubernetes evicting a pod, SLURM's `--signal`, a spot VM's
shutdown) and kill the process a while later; a scheduler that announces it otherwise can create the file
named by `KSCALE_PREEMPTION_FILE`, or the script can pass `distribute(model, preemption_notice=f)`, a
function asked where the workers agree (one that raises counts as no notice, with a warning: a worker must
not leave the others waiting in the next collective). The notice may reach one worker only, so the workers
agree, with one collective of one number, as TensorFlow's `PreemptionCheckpointHandler` and JAX's
`reached_preemption_sync_point` agree on a step: at each epoch's end, after its backup, and also at each
batch a `BackupAndRestore(save_freq=N)` backs up after, which kscale resumes at the next batch (Keras 3:
kscale/callbacks/shared_backup.py; tf.keras: kscale/keras2/backup_inside_epoch.py), where the backup's
folder is local or shared (not gs://). Without a `BackupAndRestore` in fit's callbacks nothing here runs:
SIGTERM ends the process as it did.

143 is 128 + SIGTERM, what a process the notice had killed would report, and an exit status that
restart policies retry (Kubeflow's `ExitCode` policy retries it; 1 is a permanent error to it).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kscale import checkpoint_io, environment, log
from kscale.environment import PREEMPTED_EXIT_STATUS


class Preempted(SystemExit):
    """Raised out of fit on every worker once they agreed to stop: the process exits with status 143
    (a SystemExit: no traceback, and a script's `except Exception` does not swallow it)."""

    def __init__(self, epoch: int) -> None:
        super().__init__(PREEMPTED_EXIT_STATUS)
        self.epoch = epoch


class Notice:
    """Whether this process was told it will be preempted: SIGTERM while fit runs, the notice file, or the
    script's function (`asked`)."""

    def __init__(self, file: str | None = None, asked: Callable[[], bool] | None = None) -> None:
        self.file = file
        self.asked = asked
        self.signalled = False

    def received(self) -> bool:
        if self.signalled or (self.file is not None and checkpoint_io.exists(self.file)):
            return True
        return self.asked is not None and self._ask()

    def _ask(self) -> bool:
        try:
            return bool(self.asked())
        except Exception as error:  # the script's function: count it as no notice
            log.warning(f"preemption_notice raised {error!r}; counted as no notice this time")
            return False

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        """SIGTERM only records the notice while fit runs; the handler before is back afterwards. Python lets
        the main thread alone set handlers: elsewhere only the file is a notice."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.signalled = True


def stop_for(
    backups: list,
    keras_callbacks: Any,
    gather: Callable[[np.ndarray], np.ndarray],
    is_chief: bool,
    asked: Callable[[], bool] | None = None,
) -> Any | None:
    """The callback that stops fit for a notice where fit has `backups` (its BackupAndRestore callbacks; a
    stop of the family's Keras, `keras_callbacks`: its callbacks module), else None. `asked`: distribute's preemption_notice.
    kscale resumes a backup written inside an epoch at the next batch where its folder is local or shared
    (not gs://: Keras 3's journal is local): the stop then also agrees at those batches (only then has it
    batch hooks: Keras runs them at every step)."""
    if not backups:
        if asked is not None:
            log.chief(
                "WARNING: distribute's preemption_notice is not asked in this fit: it has no "
                "keras.callbacks.BackupAndRestore to resume from (add one to fit's callbacks)",
                is_chief,
            )
        return None
    notice = Notice(environment.current().preemption_file, asked)
    mid_epoch = [b.save_freq for b in backups if backs_up_inside_an_epoch(b)]
    at_batches = bool(mid_epoch) and checkpoint_io.is_local(backups[0].backup_dir)
    return _stop_callback_type(keras_callbacks.Callback, at_batches)(
        notice, gather, is_chief, backups[0].backup_dir, mid_epoch
    )


def backs_up_inside_an_epoch(backup: Any) -> bool:
    """A BackupAndRestore (either family's) whose `save_freq` is a number of batches."""
    return backup.save_freq != "epoch"


def also_at_backups_inside_epochs(stop: Any | None, callbacks: list) -> None:
    """The stop also agrees at each batch where one of a worker's `callbacks` wrote a backup that resumes
    at the next batch (one with `resumes_after(batch)`), not only at epoch ends."""
    if stop is not None:
        stop.resuming_inside_epochs = [cb for cb in callbacks if callable(getattr(cb, "resumes_after", None))]


def as_list(stop: Any | None) -> list:
    """fit's callbacks to add: the stop, or none."""
    return [] if stop is None else [stop]


def listening(stop: Any | None) -> contextlib.AbstractContextManager:
    """While fit runs: SIGTERM records the notice where a stop listens for it."""
    return contextlib.nullcontext() if stop is None else stop.notice.listening()


def notes(stop: Any | None, shuffled: bool = False) -> list[str]:
    """What the plan says when a notice can stop the job; `shuffled`: fit shuffles arrays each epoch."""
    if stop is None:
        return []
    inside = stop.stops_inside_epochs
    where = "at the end of the epoch under way, after BackupAndRestore's backup"
    if inside:
        where = f"once BackupAndRestore(save_freq={stop.mid_epoch_backups[0]}) next backs up (or at an epoch's end)"
    said = [
        "a preemption notice (SIGTERM to any worker, the file KSCALE_PREEMPTION_FILE names, or "
        f"distribute's preemption_notice function) stops every worker {where}, with exit status "
        f"{PREEMPTED_EXIT_STATUS}; run the same command again to resume there"
    ]
    if inside:
        said.append(
            f"BackupAndRestore(save_freq={stop.mid_epoch_backups[0]}) backs up inside epochs: a job resumed "
            "from such a backup by as many processes goes on at the batch after it, its epoch's metrics "
            "kept, as if never stopped (by another number of processes, Keras starts that epoch again)"
        )
    elif stop.mid_epoch_backups:
        said.append(
            f"BackupAndRestore(save_freq={stop.mid_epoch_backups[0]}) also backs up in the middle of an epoch, "
            "into a folder that is not local (gs://): a notice stops the job at an epoch's end only, and a job "
            "resumed from a backup inside an epoch (after a kill without notice) under Keras 3 starts that "
            "epoch again from its first batch, as Keras does in one process; save_freq='epoch', or a local "
            "or shared folder, resumes exactly"
        )
    if shuffled:
        # Measured (Keras 3 on JAX, 2 processes): resumed 0.17 from the uninterrupted run's weights, and
        # 2e-7 from one process' plain Keras resumed the same way.
        said.append(
            "a job resumed from its backup shuffles the epochs left as a new run of the script does (as "
            "Keras does in one process), not as the stopped run would have: its weights are not the "
            "uninterrupted run's; shuffle=False, or data that orders itself by epoch, resumes exactly"
        )
    return said


@functools.cache
def _stop_callback_type(callback: type, at_batches: bool) -> type:
    """The stopping callback as a `callback` (tf.keras' or Keras 3's Callback: each Keras runs its own),
    `at_batches`: also where a backup inside an epoch was written."""

    class PreemptionStop(callback):
        """Runs after the user's callbacks, so after BackupAndRestore wrote the epoch's backup."""

        def __init__(
            self,
            notice: Notice,
            gather: Callable[[np.ndarray], np.ndarray],
            is_chief: bool,
            backup_dir: str,
            mid_epoch_backups: list,
        ) -> None:
            super().__init__()
            #: The save_freq of each BackupAndRestore that also backs up inside an epoch (for the plan).
            self.mid_epoch_backups = mid_epoch_backups
            self.notice = notice
            #: The backups that resume at the batch after one written inside an epoch (`resumes_after(batch)`:
            #: Keras 3's SharedBackup, tf.keras' ResumeInsideEpoch): a notice also stops every worker there.
            self.resuming_inside_epochs: list = []
            self._epoch = 0
            self._gather = gather
            self._is_chief = is_chief
            self.backup_dir = backup_dir

        #: Whether a notice also stops every worker at a batch a backup inside an epoch was written after.
        stops_inside_epochs = False

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._epoch = epoch

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            epochs = self.params.get("epochs") or 0
            if epoch + 1 >= epochs:  # training ends here anyway (and the same on every worker)
                return
            resumes = "after its last backup" if self.stops_inside_epochs else f"at epoch {epoch + 2}"
            self._stop_if_told(f"after epoch {epoch + 1} of {epochs}", resumes)

        def _stop_if_told(self, stopped: str, resumes: str) -> None:
            told = self._gather(np.asarray([1.0 if self.notice.received() else 0.0], np.float32))[:, 0]
            if not told.any() or self.model.stop_training:
                return
            ranks = [rank for rank, noticed in enumerate(told) if noticed]
            log.chief(
                f"preemption notice on process(es) {ranks}: every worker stopped {stopped}, whose backup is "
                f"in {self.backup_dir!r}; exit status {PREEMPTED_EXIT_STATUS}. Run the same command again: "
                f"BackupAndRestore resumes {resumes}.",
                self._is_chief,
            )
            _tell_the_launcher()
            raise Preempted(self._epoch)

    if not at_batches:
        return PreemptionStop

    class PreemptionStopInsideEpochs(PreemptionStop):
        stops_inside_epochs = True

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            """Where a backup written at this batch resumes at the next one (`resuming_inside_epochs`):
            the workers agree there, on the same batch everywhere, the backup already written."""
            if any(backup.resumes_after(batch) for backup in self.resuming_inside_epochs):
                where = f"batch {batch + 1} of epoch {self._epoch + 1}"
                self._stop_if_told(f"after {where}", f"after {where}")

    return PreemptionStopInsideEpochs


def _tell_the_launcher() -> None:
    """Create the file `kscale run` named (its status then says preempted, whatever the engine reports)."""
    marker = environment.current().preempted_marker
    if marker is not None and os.path.isdir(os.path.dirname(marker)):  # not on another host's kscale run
        with open(marker, "w"):
            pass
