"""Keras 3's backup written whole (kscale/callbacks/backup_journal.py), at each point a worker can be killed:
a backup staged but not committed is dropped, a committed one is moved in, before anything restores."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path

import keras
import numpy as np
import pytest

from kscale.callbacks import backup_journal
from kscale.errors import SaveError


@pytest.fixture
def backup(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    callback = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    callback.set_model(model)
    return callback


def _write(writer, epoch: int, value: float) -> None:
    """The backup `writer` writes at the end of epoch `epoch`, of a model whose weights all equal `value`."""
    model = writer.model
    model.set_weights([np.full_like(w, value) for w in model.get_weights()])
    writer.on_epoch_end(epoch)


def _epoch_and_weights(backup) -> tuple[int, float]:
    folder = backup.backup_dir
    with open(f"{folder}/training_metadata.json") as f:
        epoch = json.load(f)["epoch"]
    model = backup.model
    model.load_weights(f"{folder}/latest.weights.h5")
    return epoch, float(model.get_weights()[0].flat[0])


def _commits(backup, tmp_path):
    """A writer into a scratch folder on the backup's file system, and its Commits (each at once, unless a
    test says the backup folder is on another file system)."""
    writer = backup_journal.staged_writer(backup, str(tmp_path / "scratch"))
    writer.set_model(backup.model)
    return writer, backup_journal.Commits(backup, writer)


def test_a_staged_backup_is_committed_whole(backup, tmp_path):
    writer, commits = _commits(backup, tmp_path)
    _write(writer, 0, 1.0)
    commits.commit()
    assert _epoch_and_weights(backup) == (1, 1.0)
    _write(writer, 1, 2.0)
    commits.commit(beside={"job.json": "{}"})
    assert _epoch_and_weights(backup) == (2, 2.0)
    assert sorted(p.name for p in Path(backup.backup_dir).iterdir()) == [
        "job.json",
        "latest.weights.h5",
        "training_metadata.json",
    ]
    commits.commit(beside={"job.json": "[]"})  # nothing staged: no write
    assert (Path(backup.backup_dir) / "job.json").read_text() == "{}"


def test_nothing_is_committed_where_no_backup_was_written(backup, tmp_path):
    _commits(backup, tmp_path)[1].commit()
    assert not (tmp_path / "backup").exists()


def test_a_backup_killed_before_its_commit_is_dropped(backup, tmp_path):
    writer, commits = _commits(backup, tmp_path)
    _write(writer, 0, 1.0)
    commits.commit()
    _write(writer, 1, 2.0)  # killed while it commits: half of it staged, never committed
    staging = tmp_path / "backup" / backup_journal.STAGING
    staging.mkdir()
    (tmp_path / "scratch" / "latest.weights.h5").rename(staging / "latest.weights.h5")
    backup_journal.recover(backup.backup_dir)
    assert _epoch_and_weights(backup) == (1, 1.0)
    assert not staging.exists()


def test_a_backup_killed_after_its_commit_is_moved_in(backup, tmp_path):
    writer, commits = _commits(backup, tmp_path)
    _write(writer, 0, 1.0)
    commits.commit()
    _write(writer, 1, 2.0)
    folder = tmp_path / "backup"
    journal = folder / backup_journal.JOURNAL
    (tmp_path / "scratch").rename(journal)  # the commit, then killed after one file moved in
    (journal / "latest.weights.h5").rename(folder / "latest.weights.h5")
    backup_journal.recover(backup.backup_dir)
    assert _epoch_and_weights(backup) == (2, 2.0)
    assert not journal.exists()


def test_double_checkpoint_keeps_the_previous_pair(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), double_checkpoint=True)
    backup.set_model(model)
    writer, commits = _commits(backup, tmp_path)
    for epoch in range(2):
        _write(writer, epoch, float(epoch + 1))
        commits.commit()
    with open(tmp_path / "backup" / "training_metadata.json.bkp") as f:
        assert json.load(f)["epoch"] == 1
    assert (tmp_path / "backup" / "latest.weights.h5.bkp").exists()


def test_a_remote_backup_is_written_as_keras_writes_it():
    assert not backup_journal.journaled(keras.callbacks.BackupAndRestore("gs://bucket/backup"))
    assert backup_journal.journaled(keras.callbacks.BackupAndRestore("/tmp/backup"))


@pytest.fixture
def another_file_system(monkeypatch):
    """The backup folder as if on another file system than the scratch folder (a shared folder)."""
    monkeypatch.setattr(backup_journal, "_one_file_system", lambda path, other: False)


def test_on_one_file_system_a_backup_is_committed_at_once(backup, tmp_path):
    """Renames only: nothing slow to move off the training thread, and a process that dies right after
    the backup leaves it committed."""
    writer, commits = _commits(backup, tmp_path)
    _write(writer, 0, 1.0)
    commits.commit(beside={"job.json": "{}"})
    assert _epoch_and_weights(backup) == (1, 1.0)  # before any wait
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "scratch"]


def test_a_backup_is_committed_off_the_training_thread(backup, tmp_path, monkeypatch, another_file_system):
    """`Commits.commit` returns while its thread still commits (held here until the test lets it go), the
    files already taken out of the writer's folder; `wait` returns once the backup is the backup."""
    held, move_in = threading.Event(), backup_journal._move_in

    def held_move_in(journal, backup_dir):
        assert held.wait(timeout=60)
        move_in(journal, backup_dir)

    monkeypatch.setattr(backup_journal, "_move_in", held_move_in)
    writer, commits = _commits(backup, tmp_path)
    _write(writer, 0, 1.0)
    commits.commit(beside={"job.json": "{}"})
    assert not (tmp_path / "backup" / "training_metadata.json").exists()  # not committed yet
    assert not (tmp_path / "scratch" / "training_metadata.json").exists()  # taken: the writer may go on
    held.set()
    commits.wait()
    assert _epoch_and_weights(backup) == (1, 1.0)
    assert (tmp_path / "backup" / "job.json").read_text() == "{}"
    _write(writer, 1, 2.0)
    commits.commit()
    commits.wait()
    assert _epoch_and_weights(backup) == (2, 2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "scratch"]  # nothing left beside


def test_a_backup_for_another_file_system_is_copied_then_committed(
    backup, tmp_path, monkeypatch, another_file_system
):
    """A backup folder on another file system than the scratch folder (a shared one): the files are copied
    into its staging folder, then committed, as when they are renamed."""
    replace = os.replace

    def across_file_systems(src, dst):
        if "-commit-" in os.path.basename(src):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", across_file_systems)
    writer, commits = _commits(backup, tmp_path)
    _write(writer, 0, 1.0)
    commits.commit()
    commits.wait()
    assert _epoch_and_weights(backup) == (1, 1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "scratch"]


def test_a_commit_that_fails_is_raised_on_the_training_thread_and_the_backup_before_stands(
    backup, tmp_path, monkeypatch, another_file_system
):
    writer, commits = _commits(backup, tmp_path)
    _write(writer, 0, 1.0)
    commits.commit()
    commits.wait()

    replace = os.replace

    def full(src, dst):  # the staging folder written, its commit refused
        if os.path.basename(dst) == backup_journal.JOURNAL:
            raise OSError(errno.ENOSPC, "No space left on device")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", full)
    _write(writer, 1, 2.0)
    commits.commit()
    with pytest.raises(SaveError, match="could not be committed"):
        commits.wait()
    monkeypatch.undo()
    backup_journal.recover(backup.backup_dir)  # the next start: the staged backup dropped
    assert _epoch_and_weights(backup) == (1, 1.0)
    commits.wait()  # raised once


def test_the_next_fits_restore_waits_for_a_commit_still_under_way(
    backup, tmp_path, monkeypatch, another_file_system
):
    """A fit that ended on an error did not wait for its commit: the next fit's recover() does, before it
    looks at the backup folder (here the commit is let go a moment after recover() is called)."""
    held, commit = threading.Event(), backup_journal._commit

    def held_commit(*args):
        assert held.wait(timeout=60)
        commit(*args)

    monkeypatch.setattr(backup_journal, "_commit", held_commit)
    writer, commits = _commits(backup, tmp_path)
    _write(writer, 0, 1.0)
    commits.commit()
    threading.Timer(0.5, held.set).start()
    backup_journal.recover(backup.backup_dir)
    assert _epoch_and_weights(backup) == (1, 1.0)
