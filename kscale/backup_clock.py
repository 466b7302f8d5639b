"""`distribute(model, backup_minutes=M)`: the user's `BackupAndRestore` backs up every M minutes of
training, not every N batches or at epochs' ends only.

Every process must back up at the same batch (saving is collective on JAX and tf.distribute, and a backup
inside an epoch resumes at the batch after it), so no process reads its own clock to decide: at each
backup the processes agree, with one collective of one number, on the slowest one's seconds per batch
since the backup before, and the next backup comes after the batches that take M minutes at that pace
(the backup's `save_freq`, which Keras counts as ever). A job whose steps slow down backs up later than M
minutes by as much; the next interval is measured anew. The first backup comes after the backup's own
`save_freq` batches, or after 2 where it was 'epoch' (the first measurement: the first step holds
compiling). The time a backup takes is not counted. Backups then come inside epochs only (Keras backs
up at an epoch's end where save_freq is 'epoch'), and resume at the batch after them
(kscale/callbacks/shared_backup.py, kscale/keras2/backup_inside_epoch.py).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

#: The first backup's batches where the user's save_freq was 'epoch'.
FIRST_BACKUP_BATCHES = 2

_clocks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class BackupClock:
    """The pace of one BackupAndRestore's job, measured between its backups."""

    def __init__(self, minutes: float, now: Callable[[], float] = time.monotonic) -> None:
        self.seconds = minutes * 60.0
        self._now = now
        self._since = now()

    def start(self) -> None:
        """Training begins (or a backup was just written): count from here."""
        self._since = self._now()

    def batches_to_next_backup(self, batches: int, gather: Callable[[np.ndarray], np.ndarray]) -> int:
        """After a backup `batches` after the last one: how many batches the next one comes after, agreed by
        every process (`gather`: one row per process)."""
        pace = gather(np.asarray([(self._now() - self._since) / max(1, batches)], np.float64))
        slowest = float(np.max(pace))
        return max(1, int(self.seconds // slowest)) if slowest > 0 else 1


def timed(backups: list, minutes: float | None) -> None:
    """Each BackupAndRestore in `backups` backs up every `minutes` (None: as the user set it): its first
    backup after its own save_freq batches (FIRST_BACKUP_BATCHES where 'epoch')."""
    if minutes is None:
        return
    for backup in backups:
        if backup.save_freq == "epoch" or not isinstance(backup.save_freq, int):
            backup.save_freq = FIRST_BACKUP_BATCHES
        _clocks[backup] = BackupClock(minutes)


def start(backup: Any) -> None:
    """Training begins: a backup every M minutes counts from here (nothing for the user's own save_freq)."""
    if (clock := _clocks.get(backup)) is not None:
        clock.start()


def pace_next(backup: Any, batches: int, gather: Callable[[np.ndarray], np.ndarray]) -> int | None:
    """Right after a backup `batches` after the last one: for a backup every M minutes, the batches to the
    next one, agreed by every process, its clock counting from now; None for the user's own save_freq."""
    clock = _clocks.get(backup)
    if clock is None:
        return None
    batches = clock.batches_to_next_backup(batches, gather)
    clock.start()
    return batches


def notes(minutes: float | None, backups: list) -> list[str]:
    """What the plan says of backups every M minutes."""
    if minutes is None or not backups:
        return []
    return [
        f"BackupAndRestore backs up every {minutes:g} minutes of training (the slowest process' pace since "
        f"the last backup, agreed at each backup), first after {backups[0].save_freq} batches, inside "
        "epochs rather than at their ends; a job resumed from such a backup goes on at the batch after it"
    ]
