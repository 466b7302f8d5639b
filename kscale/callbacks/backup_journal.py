"""Write Keras 3's backup (its weights file and its epoch file) as one: a worker killed while it writes
leaves the previous backup or the new one, never the new weights with the old epoch.

Keras 3's BackupAndRestore writes `latest.weights.h5`, then `training_metadata.json` (the epoch to resume
at), each in place. Killed between the two (a preemption notice's grace period ends, a node is lost),
the job resumes the epoch just trained again from the weights it ended with, silently; killed inside the
second, the epoch file is cut short and every restart fails on it. Here the chief's backup is written by
a BackupAndRestore of the same settings into a folder inside the backup folder (`STAGING`); once both of
its files are there, that folder is renamed to `JOURNAL` (one step: the backup is then committed), and its
files are moved over the backup's. At the next start, a committed journal is moved in first and staged
files that were never committed are deleted, before anything restores. Local file systems only, where a
folder is renamed in one step; elsewhere (gs://) Keras writes its files as it always does.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import keras

from kscale import _keras_private, checkpoint_io

#: The folder inside the backup folder where the next backup is written.
STAGING = ".kscale-next"
#: The folder a complete next backup is renamed to: from then on it is the backup.
JOURNAL = ".kscale-commit"


def journaled(backup: Any) -> bool:
    """Whether `backup` (a Keras 3 BackupAndRestore) is written through the journal: a local folder."""
    return checkpoint_io.is_local(backup.backup_dir)


def staged_writer(backup: Any) -> Any:
    """A BackupAndRestore that writes what `backup` would, into its staging folder."""
    return keras.callbacks.BackupAndRestore(
        os.path.join(backup.backup_dir, STAGING),
        save_freq=backup.save_freq,
        double_checkpoint=False,
        delete_checkpoint=False,
    )


def commit_if_staged(backup: Any, writer: Any, beside: dict[str, str] | None = None) -> None:
    """Where `writer` (staged_writer's) has just written a whole backup: make it `backup`'s backup, with
    the files `beside` names (name: text) committed in the same step."""
    staged_weights, staged_epoch = _keras_private.backup_files(writer)[:2]
    if not (os.path.exists(staged_weights) and os.path.exists(staged_epoch)):
        return
    for name, text in (beside or {}).items():
        with open(os.path.join(writer.backup_dir, name), "w") as f:
            f.write(text)
    weights, epoch, previous_weights, previous_epoch = _keras_private.backup_files(backup)
    if backup.double_checkpoint:  # Keras' own: the previous pair kept beside
        for path, previous in ((weights, previous_weights), (epoch, previous_epoch)):
            if os.path.exists(path):
                shutil.copyfile(path, previous)
    journal = os.path.join(backup.backup_dir, JOURNAL)
    os.replace(writer.backup_dir, journal)  # committed
    _move_in(journal, backup.backup_dir)


def recover(backup_dir: str) -> None:
    """Before a restore: finish a committed backup's move, and delete a backup that was never committed."""
    journal = os.path.join(backup_dir, JOURNAL)
    if os.path.isdir(journal):
        _move_in(journal, backup_dir)
    shutil.rmtree(os.path.join(backup_dir, STAGING), ignore_errors=True)


def _move_in(journal: str, backup_dir: str) -> None:
    for name in os.listdir(journal):
        os.replace(os.path.join(journal, name), os.path.join(backup_dir, name))
    os.rmdir(journal)
