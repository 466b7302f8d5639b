"""Keras 3's backup written whole (kscale/callbacks/backup_journal.py), at each point a worker can be killed:
a backup staged but not committed is dropped, a committed one is moved in, before anything restores."""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest

from kscale.callbacks import backup_journal


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


def _writer(backup):
    writer = backup_journal.staged_writer(backup)
    writer.set_model(backup.model)
    return writer


def test_a_staged_backup_is_committed_whole(backup):
    writer = _writer(backup)
    _write(writer, 0, 1.0)
    backup_journal.commit_if_staged(backup, writer)
    assert _epoch_and_weights(backup) == (1, 1.0)
    _write(writer, 1, 2.0)
    backup_journal.commit_if_staged(backup, writer, beside={"job.json": "{}"})
    assert _epoch_and_weights(backup) == (2, 2.0)
    assert sorted(p.name for p in Path(backup.backup_dir).iterdir()) == [
        "job.json",
        "latest.weights.h5",
        "training_metadata.json",
    ]
    backup_journal.commit_if_staged(backup, writer, beside={"job.json": "[]"})  # nothing staged: no write
    assert (Path(backup.backup_dir) / "job.json").read_text() == "{}"


def test_nothing_is_committed_where_no_backup_was_written(backup, tmp_path):
    backup_journal.commit_if_staged(backup, _writer(backup))
    assert not (tmp_path / "backup").exists()


def test_a_backup_killed_before_its_commit_is_dropped(backup, tmp_path):
    writer = _writer(backup)
    _write(writer, 0, 1.0)
    backup_journal.commit_if_staged(backup, writer)
    _write(writer, 1, 2.0)  # killed here: staged, never committed
    (tmp_path / "backup" / backup_journal.STAGING / "training_metadata.json").unlink()  # half of it
    backup_journal.recover(backup.backup_dir)
    assert _epoch_and_weights(backup) == (1, 1.0)
    assert not (tmp_path / "backup" / backup_journal.STAGING).exists()


def test_a_backup_killed_after_its_commit_is_moved_in(backup, tmp_path):
    writer = _writer(backup)
    _write(writer, 0, 1.0)
    backup_journal.commit_if_staged(backup, writer)
    _write(writer, 1, 2.0)
    folder = tmp_path / "backup"
    journal = folder / backup_journal.JOURNAL
    (folder / backup_journal.STAGING).rename(journal)  # the commit, then killed after one file moved in
    (journal / "latest.weights.h5").rename(folder / "latest.weights.h5")
    backup_journal.recover(backup.backup_dir)
    assert _epoch_and_weights(backup) == (2, 2.0)
    assert not journal.exists()


def test_double_checkpoint_keeps_the_previous_pair(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), double_checkpoint=True)
    backup.set_model(model)
    writer = _writer(backup)
    for epoch in range(2):
        _write(writer, epoch, float(epoch + 1))
        backup_journal.commit_if_staged(backup, writer)
    with open(tmp_path / "backup" / "training_metadata.json.bkp") as f:
        assert json.load(f)["epoch"] == 1
    assert (tmp_path / "backup" / "latest.weights.h5.bkp").exists()


def test_a_remote_backup_is_written_as_keras_writes_it():
    assert not backup_journal.journaled(keras.callbacks.BackupAndRestore("gs://bucket/backup"))
    assert backup_journal.journaled(keras.callbacks.BackupAndRestore("/tmp/backup"))
