"""kscale/preemption.py in one process: a notice (the file KSCALE_PREEMPTION_FILE names, or SIGTERM) stops fit
after the epoch under way, once BackupAndRestore has written its backup, and fit run again resumes there."""

from __future__ import annotations

import logging
import signal

import numpy as np
import pytest
import tensorflow as tf

import kscale
from kscale import environment, preemption

from .conftest import tiny_model

X = np.arange(48, dtype="float32").reshape(16, 3) / 48
Y = X.sum(axis=1, keepdims=True)


class NoticeAtStep(tf.keras.callbacks.Callback):
    """Creates the notice file after step `step` (counted from 1 over all epochs); records the epochs run."""

    def __init__(self, path, step: int) -> None:
        super().__init__()
        self.path, self.step, self.epochs = path, step, []

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            self.path.touch()

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)


@pytest.fixture
def notice_file(tmp_path, monkeypatch, single_process):
    path = tmp_path / "notice"
    monkeypatch.setenv("KSCALE_PREEMPTION_FILE", str(path))
    environment.reset()
    yield path
    environment.reset()


def _fit(model, backup_dir, callback, epochs: int = 3):
    backup = tf.keras.callbacks.BackupAndRestore(str(backup_dir))
    return model.fit(
        X, Y, batch_size=4, epochs=epochs, shuffle=False, verbose=0, callbacks=[backup, callback]
    )


def test_a_notice_stops_after_the_epoch_under_way_and_fit_again_resumes_there(notice_file, tmp_path):
    model = kscale.distribute(tiny_model(), print_plan=False)
    handler = signal.getsignal(signal.SIGTERM)
    stopped = NoticeAtStep(notice_file, step=6)  # 4 steps an epoch: in epoch 1
    with pytest.raises(preemption.Preempted) as raised:
        _fit(model, tmp_path / "backup", stopped)
    assert raised.value.code == 143 and raised.value.epoch == 1
    assert stopped.epochs == [0, 1]  # epoch 1 ran to its end
    assert int(model.optimizer.iterations.numpy()) == 8
    assert (tmp_path / "backup").exists()  # kept: fit did not end, BackupAndRestore did not delete it
    assert signal.getsignal(signal.SIGTERM) is handler  # SIGTERM's handler is back

    notice_file.unlink()  # the new job has no notice
    resumed_model = kscale.distribute(tiny_model(seed=5), print_plan=False)
    resumed = NoticeAtStep(notice_file, step=0)
    _fit(resumed_model, tmp_path / "backup", resumed)
    assert resumed.epochs == [2] and int(resumed_model.optimizer.iterations.numpy()) == 12

    uninterrupted = tiny_model()
    uninterrupted.fit(X, Y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    for ours, theirs in zip(resumed_model.get_weights(), uninterrupted.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def test_a_notice_in_the_last_epoch_lets_fit_end(notice_file, tmp_path):
    model = kscale.distribute(tiny_model(), print_plan=False)
    callback = NoticeAtStep(notice_file, step=10)
    _fit(model, tmp_path / "backup", callback)
    assert callback.epochs == [0, 1, 2] and int(model.optimizer.iterations.numpy()) == 12


def test_sigterm_while_fit_runs_is_a_notice(single_process, tmp_path):
    class SigtermAtStep(NoticeAtStep):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == self.step:
                signal.raise_signal(signal.SIGTERM)

    model = kscale.distribute(tiny_model(), print_plan=False)
    with pytest.raises(preemption.Preempted):
        _fit(model, tmp_path / "backup", SigtermAtStep(None, step=2))
    assert int(model.optimizer.iterations.numpy()) == 4


def test_the_scripts_notice_function_is_a_notice(single_process, tmp_path):
    """distribute's preemption_notice: asked at each epoch's end, True stops fit there as SIGTERM does."""
    model = kscale.distribute(
        tiny_model(), print_plan=False, preemption_notice=lambda: int(model.optimizer.iterations.numpy()) >= 6
    )
    counted = NoticeAtStep(tmp_path / "unused", step=0)
    with pytest.raises(preemption.Preempted) as raised:
        _fit(model, tmp_path / "backup", counted)
    assert raised.value.epoch == 1 and counted.epochs == [0, 1]


def test_a_notice_function_that_raises_counts_as_no_notice(single_process, tmp_path):
    def broken() -> bool:
        raise ConnectionError("metadata server unreachable")

    model = kscale.distribute(tiny_model(), print_plan=False, preemption_notice=broken)
    counted = NoticeAtStep(tmp_path / "unused", step=0)
    _fit(model, tmp_path / "backup", counted)
    assert counted.epochs == [0, 1, 2] and int(model.optimizer.iterations.numpy()) == 12


def test_a_notice_function_without_a_backup_is_said_to_be_unused(single_process, capsys, monkeypatch):
    monkeypatch.setattr(
        logging.getLogger("kscale"), "handlers", []
    )  # it binds sys.stdout when it first prints
    model = kscale.distribute(tiny_model(), print_plan=False, preemption_notice=lambda: True)
    model.fit(X, Y, batch_size=4, epochs=2, verbose=0)  # not stopped: nothing to resume from
    assert int(model.optimizer.iterations.numpy()) == 8
    assert "preemption_notice is not asked in this fit" in capsys.readouterr().out


def test_a_notice_that_is_not_a_function_is_refused(single_process):
    from kscale.errors import OptionError

    with pytest.raises(OptionError, match=r"preemption_notice=.* must be a function"):
        kscale.distribute(tiny_model(), print_plan=False, preemption_notice=True)


def test_without_a_backup_nothing_listens(single_process):
    model = kscale.distribute(tiny_model(), print_plan=False)
    handlers = []

    class Handler(tf.keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            handlers.append(signal.getsignal(signal.SIGTERM))

    model.fit(X, Y, batch_size=4, epochs=1, verbose=0, callbacks=[Handler()])
    assert handlers == [signal.getsignal(signal.SIGTERM)]


def test_the_plan_says_a_backup_inside_an_epoch_resumes_exactly_unless_on_gs(single_process):
    local = [tf.keras.callbacks.BackupAndRestore("/tmp/unused", save_freq=5)]
    notes = preemption.notes(preemption.stop_for(local, tf.keras.callbacks, lambda v: v[None], True))
    assert (
        "once BackupAndRestore(save_freq=5) next backs up" in notes[0] and "as if never stopped" in notes[1]
    )
    on_gs = [tf.keras.callbacks.BackupAndRestore("gs://bucket/backup", save_freq=5)]
    notes = preemption.notes(preemption.stop_for(on_gs, tf.keras.callbacks, lambda v: v[None], True))
    assert "at the end of the epoch under way" in notes[0] and "not local (gs://)" in notes[1]
    every_epoch = [tf.keras.callbacks.BackupAndRestore("/tmp/unused")]
    assert (
        len(preemption.notes(preemption.stop_for(every_epoch, tf.keras.callbacks, lambda v: v[None], True)))
        == 1
    )
    assert preemption.stop_for([], tf.keras.callbacks, lambda v: v[None], True) is None


def test_the_stop_has_batch_hooks_only_where_it_stops_inside_epochs(single_process):
    """Keras runs a callback's batch hooks at every step (and waits for each step's logs there): the stop
    has them only for backups inside an epoch, which kscale resumes at the next batch (a local folder)."""
    gather = lambda v: v[None]  # noqa: E731
    base = tf.keras.callbacks.Callback.on_train_batch_end
    stop = preemption.stop_for(
        [tf.keras.callbacks.BackupAndRestore("/tmp/unused")], tf.keras.callbacks, gather, True
    )
    assert type(stop).on_train_batch_end is base and not stop.stops_inside_epochs
    inside = [tf.keras.callbacks.BackupAndRestore("/tmp/unused", save_freq=5)]
    stop = preemption.stop_for(inside, tf.keras.callbacks, gather, True)
    assert type(stop).on_train_batch_end is not base and stop.stops_inside_epochs
    assert "once BackupAndRestore(save_freq=5) next backs up" in preemption.notes(stop)[0]
    on_gs = [tf.keras.callbacks.BackupAndRestore("gs://bucket/backup", save_freq=5)]
    assert not preemption.stop_for(on_gs, tf.keras.callbacks, gather, True).stops_inside_epochs


def test_the_plan_says_a_resumed_job_shuffles_as_a_new_run(single_process):
    stop = preemption.stop_for(
        [tf.keras.callbacks.BackupAndRestore("/tmp/unused")], tf.keras.callbacks, lambda v: v[None], True
    )
    assert len(preemption.notes(stop, shuffled=False)) == 1
    assert "shuffles the epochs left as a new run" in preemption.notes(stop, shuffled=True)[1]
