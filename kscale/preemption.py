"""A preemption notice stops every worker of a job at the end of the epoch under way, after the user's
`BackupAndRestore` has written that epoch's backup, with exit status 143: run again, the job resumes there.

Schedulers announce a preemption with SIGTERM (Kubernetes evicting a pod, SLURM's `--signal`, a spot VM's
shutdown) and kill the process a while later; a scheduler that announces it otherwise can create the file
named by `KSCALE_PREEMPTION_FILE`, or the script can pass `distribute(model, preemption_notice=f)`, a
function asked at each epoch's end (one that raises counts as no notice, with a warning: a worker must not
leave the others waiting in the next collective). The notice may reach one worker only, so the workers agree at each
epoch's end, with one collective of one number, as TensorFlow's `PreemptionCheckpointHandler` and JAX's
`reached_preemption_sync_point` agree on a step. An epoch's end, not the next step: Keras'
`BackupAndRestore` resumes at the start of an epoch (Keras 3 restores the epoch only; tf.keras restores
the step count but starts the epoch's data from its first batch), so only a backup at an epoch's end
resumes exactly. Without a `BackupAndRestore` in fit's callbacks nothing here runs: SIGTERM ends the
process as it did.

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
    callbacks: list,
    keras_callbacks: Any,
    gather: Callable[[np.ndarray], np.ndarray],
    is_chief: bool,
    asked: Callable[[], bool] | None = None,
) -> Any | None:
    """The callback that stops fit for a notice where `callbacks` hold a BackupAndRestore of the family's
    Keras (`keras_callbacks`: its callbacks module), else None. `asked`: distribute's preemption_notice."""
    backups = [cb for cb in callbacks if isinstance(cb, keras_callbacks.BackupAndRestore)]
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
    return _stop_callback_type(keras_callbacks.Callback)(
        notice, gather, is_chief, backups[0].backup_dir, mid_epoch
    )


def backs_up_inside_an_epoch(backup: Any) -> bool:
    """A BackupAndRestore (either family's) whose `save_freq` is a number of batches."""
    return backup.save_freq != "epoch"


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
    said = [
        "a preemption notice (SIGTERM to any worker, the file KSCALE_PREEMPTION_FILE names, or "
        "distribute's preemption_notice function) stops every "
        "worker at the end of the epoch under way, after BackupAndRestore's backup, with exit status "
        f"{PREEMPTED_EXIT_STATUS}; run the same command again to resume at the next epoch"
    ]
    if stop.mid_epoch_backups:
        said.append(
            f"BackupAndRestore(save_freq={stop.mid_epoch_backups[0]}) also backs up in the middle of an epoch: "
            "a job resumed from such a backup (after a kill without notice) does not end as an uninterrupted "
            "run would: Keras 3 starts that epoch again from its first batch, tf.keras goes on from the step "
            "it was written at but reads that epoch's data again from its first batch, as each does in one "
            "process; save_freq='epoch' resumes exactly"
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
def _stop_callback_type(callback: type) -> type:
    """The stopping callback as a `callback` (tf.keras' or Keras 3's Callback: each Keras runs its own)."""

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
            self._gather = gather
            self._is_chief = is_chief
            self._backup_dir = backup_dir

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            epochs = self.params.get("epochs") or 0
            if epoch + 1 >= epochs:  # training ends here anyway (and the same on every worker)
                return
            told = self._gather(np.asarray([1.0 if self.notice.received() else 0.0], np.float32))[:, 0]
            if not told.any() or self.model.stop_training:
                return
            ranks = [rank for rank, noticed in enumerate(told) if noticed]
            log.chief(
                f"preemption notice on process(es) {ranks}: every worker stopped after epoch {epoch + 1} of "
                f"{epochs}, whose backup is in {self._backup_dir!r}; exit status {PREEMPTED_EXIT_STATUS}. Run "
                f"the same command again: BackupAndRestore resumes at epoch {epoch + 2}.",
                self._is_chief,
            )
            _tell_the_launcher()
            raise Preempted(epoch)

    return PreemptionStop


def _tell_the_launcher() -> None:
    """Create the file `kscale run` named (its status then says preempted, whatever the engine reports)."""
    marker = environment.current().preempted_marker
    if marker is not None and os.path.isdir(os.path.dirname(marker)):  # not on another host's kscale run
        with open(marker, "w"):
            pass
