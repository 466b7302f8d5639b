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

Off the training thread (`Commits`): the chief's writer (in one process, the process's) writes into a
local scratch folder of its own at the backup's step (Keras' save_weights: the part that reads the live
variables), and where the backup folder is on another file system (a shared folder), a thread of its own
copies those files there (the slow part) and commits them while training goes on. One backup is under
way at most: the next one waits for it, and so does fit's end. On one file system the commit is renames,
done at once.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from typing import Any

import keras

from kscale import _keras_private, checkpoint_io
from kscale.errors import SaveError

#: The folder inside the backup folder where the next backup is written.
STAGING = ".kscale-next"
#: The folder a complete next backup is renamed to: from then on it is the backup.
JOURNAL = ".kscale-commit"


def journaled(backup: Any) -> bool:
    """Whether `backup` (a Keras 3 BackupAndRestore) is written through the journal: a local folder."""
    return checkpoint_io.is_local(backup.backup_dir)


def staged_writer(backup: Any, folder: str) -> Any:
    """A BackupAndRestore that writes what `backup` would, into `folder` (a local scratch folder)."""
    return keras.callbacks.BackupAndRestore(
        folder,
        save_freq=backup.save_freq,
        double_checkpoint=False,
        delete_checkpoint=False,
    )


def _staged(writer: Any) -> bool:
    return all(os.path.exists(path) for path in _keras_private.backup_files(writer)[:2])


def _commit(backup: Any, folder: str, beside: dict[str, str] | None) -> None:
    """`folder`'s backup files, with the files `beside` names (name: text), made `backup`'s backup in one
    step (renamed into its staging folder, or copied there from another file system, then committed)."""
    staging = os.path.join(backup.backup_dir, STAGING)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        os.replace(folder, staging)
    except OSError:  # another file system (a shared folder): a copy, committed only once whole
        shutil.copytree(folder, staging)
        shutil.rmtree(folder, ignore_errors=True)
    for name, text in (beside or {}).items():
        with open(os.path.join(staging, name), "w") as f:
            f.write(text)
    weights, epoch, previous_weights, previous_epoch = _keras_private.backup_files(backup)
    if backup.double_checkpoint:  # Keras' own: the previous pair kept beside
        for path, previous in ((weights, previous_weights), (epoch, previous_epoch)):
            if os.path.exists(path):
                shutil.copyfile(path, previous)
    journal = os.path.join(backup.backup_dir, JOURNAL)
    os.replace(staging, journal)  # committed
    _move_in(journal, backup.backup_dir)


class Commits:
    """The backups `writer` writes into a local scratch folder, each committed as `backup`'s backup on a
    thread of its own while training goes on, where the backup folder is on another file system (a shared
    one: the files are copied); on the same one, at once (renamed).

    At each backup its files are taken out of the writer's folder at once (renamed into a folder beside
    it: the writer may write the next one) and the thread puts them into the backup folder and commits
    them. One is under way at most: `commit` waits for the one before, as `wait` does (fit's end); an
    error in it is raised there, on the training thread, and said at once on the chief's standard error.
    The thread is not a daemon: a process that leaves (a preemption's exit) first finishes the commit
    under way."""

    def __init__(self, backup: Any, writer: Any) -> None:
        self.backup = backup
        self.writer = writer
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._count = 0

    def commit(self, beside: dict[str, str] | None = None) -> None:
        """Where the writer has just written a whole backup: commit it (with `beside`) off this thread."""
        self.wait()
        if not _staged(self.writer):
            return
        self._count += 1
        # Beside the writer's folder (the same file system), and named after it: a process killed while
        # it commits leaves it to the next start's cleanup (shared_backup.scratch_folder).
        taken = f"{self.writer.backup_dir}-commit-{self._count}"
        os.makedirs(taken)
        for path in _keras_private.backup_files(self.writer)[:2]:
            os.replace(path, os.path.join(taken, os.path.basename(path)))
        os.makedirs(self.backup.backup_dir, exist_ok=True)
        if _one_file_system(taken, self.backup.backup_dir):
            # One file system: the commit is renames, nothing slow to move off this thread, and a process
            # that dies right after the backup (os._exit, a crash) leaves it committed.
            _commit(self.backup, taken, beside)
            return
        self._thread = threading.Thread(
            target=self._run, args=(taken, beside), name="kscale-backup-commit", daemon=False
        )
        self._thread.start()
        _UNDER_WAY[os.path.abspath(self.backup.backup_dir)] = self._thread

    def _run(self, taken: str, beside: dict[str, str] | None) -> None:
        try:
            _commit(self.backup, taken, beside)
        except BaseException as err:  # raised on the training thread by wait()
            self._error = err
            print(
                f"kscale: the backup could not be committed into {self.backup.backup_dir!r}: {err!r}",
                file=sys.stderr,
                flush=True,
            )
        finally:
            shutil.rmtree(taken, ignore_errors=True)  # moved away already, but where the commit failed

    def wait(self) -> None:
        """Until the backup under way is committed; raises SaveError where it could not be."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        failed, self._error = self._error, None
        if failed is not None:
            raise SaveError(
                f"BackupAndRestore: a backup could not be committed into {self.backup.backup_dir!r} "
                f"({failed!r}); a restart resumes from the last one committed whole. Check that the folder "
                "is writable and has room."
            ) from failed


def _one_file_system(path: str, other: str) -> bool:
    return os.stat(path).st_dev == os.stat(other).st_dev


#: The commit under way into each backup folder (its absolute path): a fit that ended on an error did not
#: wait for its own, and the next fit's restore must (recover).
_UNDER_WAY: dict[str, threading.Thread] = {}


def recover(backup_dir: str) -> None:
    """Before a restore: finish a committed backup's move, and delete a backup that was never committed
    (after the commit of this process under way into `backup_dir`, if any, ended)."""
    under_way = _UNDER_WAY.pop(os.path.abspath(backup_dir), None)
    if under_way is not None:
        under_way.join()
    journal = os.path.join(backup_dir, JOURNAL)
    if os.path.isdir(journal):
        _move_in(journal, backup_dir)
    shutil.rmtree(os.path.join(backup_dir, STAGING), ignore_errors=True)


def _move_in(journal: str, backup_dir: str) -> None:
    for name in os.listdir(journal):
        os.replace(os.path.join(journal, name), os.path.join(backup_dir, name))
    os.rmdir(journal)
