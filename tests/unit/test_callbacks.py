"""kscale.callbacks: which callbacks run on non-chief workers, and checkpoints that save atomically."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

import kscale
from kscale import checkpoint_io
from kscale.backends.multi_worker import MultiWorkerBackend
from kscale.callbacks import AverageMetrics, ChiefWritesBackup, chief_only, for_this_worker, is_chief_only

from .conftest import StubWorkers, regression_data, tiny_model


def file_writers(tmp_path) -> dict[str, tf.keras.callbacks.Callback]:
    return {
        "TensorBoard": tf.keras.callbacks.TensorBoard(log_dir=str(tmp_path / "logs")),
        "CSVLogger": tf.keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
        "ProgbarLogger": tf.keras.callbacks.ProgbarLogger(),
        "RemoteMonitor": tf.keras.callbacks.RemoteMonitor(),
    }


def everyone(tmp_path) -> dict[str, tf.keras.callbacks.Callback]:
    """Callbacks every worker runs. ModelCheckpoint saves through the model's save, which kscale binds to
    write on the chief: it runs everywhere, so its state (`best`) is the same on every rank."""
    return {
        "ModelCheckpoint": tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpt.h5")),
        "EarlyStopping": tf.keras.callbacks.EarlyStopping(),
        "LambdaCallback": tf.keras.callbacks.LambdaCallback(),
        "ReduceLROnPlateau": tf.keras.callbacks.ReduceLROnPlateau(),
        "TerminateOnNaN": tf.keras.callbacks.TerminateOnNaN(),
    }


def names(callbacks) -> set[str]:
    return {type(cb).__name__ for cb in callbacks}


class SecondOfTwoStrategyWorkers(MultiWorkerBackend):
    """The multi-worker strategy rule, as worker 1 of 2 sees it (no strategy is created for it)."""

    num_workers = 2
    worker_index = 1


def test_the_chief_runs_every_callback(tmp_path):
    callbacks = [*file_writers(tmp_path).values(), *everyone(tmp_path).values()]
    kept = StubWorkers(0, 2).user_callbacks(callbacks)
    assert kept == callbacks and kept is not callbacks


def test_non_chief_workers_drop_file_writers(tmp_path):
    callbacks = [*file_writers(tmp_path).values(), *everyone(tmp_path).values()]
    assert names(StubWorkers(1, 2).user_callbacks(callbacks)) == set(everyone(tmp_path))


def test_multi_worker_strategy_keeps_the_writers_that_must_run_everywhere(tmp_path):
    writers = file_writers(tmp_path)
    backup = tf.keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    kept = SecondOfTwoStrategyWorkers(kscale.environment.Environment()).user_callbacks(
        [*writers.values(), backup]
    )
    assert names(kept) == {"TensorBoard", "BackupAndRestore"}
    assert "CSVLogger" not in names(kept)


def test_backup_and_restore_runs_on_every_worker(tmp_path):
    backup = tf.keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    assert StubWorkers(1, 2).user_callbacks([backup]) == [backup]


def test_user_marked_callbacks_run_on_the_chief_only():
    mine = tf.keras.callbacks.LambdaCallback()
    assert not is_chief_only(mine)
    assert chief_only(mine) is mine
    assert is_chief_only(mine) and is_chief_only(mine, everywhere_types=(tf.keras.callbacks.Callback,))
    assert for_this_worker([mine], is_chief=False) == []
    assert StubWorkers(1, 2).user_callbacks([mine]) == []
    assert SecondOfTwoStrategyWorkers(kscale.environment.Environment()).user_callbacks([mine]) == []
    assert for_this_worker([mine], is_chief=True) == [mine]


@pytest.mark.parametrize("is_chief", [True, False])
def test_callbacks_that_print_print_on_the_chief_only(is_chief):
    printing = [
        tf.keras.callbacks.ReduceLROnPlateau(verbose=1),
        tf.keras.callbacks.EarlyStopping(verbose=1),
        tf.keras.callbacks.ModelCheckpoint("unused.keras", verbose=1),
    ]
    kept = for_this_worker(printing, is_chief=is_chief)
    assert kept == printing and [cb.verbose for cb in kept] == [int(is_chief)] * 3


def test_chief_only_is_exported_at_the_top_level():
    import kscale

    assert kscale.chief_only is chief_only


@pytest.mark.parametrize(("worker", "written"), [(0, True), (1, False)])
def test_distributed_fit_writes_logs_on_the_chief_only(tmp_path, distribute_as_worker, worker, written):
    distributed = distribute_as_worker(tiny_model(), worker_index=worker)
    log = tmp_path / "log.csv"
    distributed.fit(
        *regression_data(8), batch_size=2, callbacks=[tf.keras.callbacks.CSVLogger(str(log))], verbose=0
    )
    assert log.exists() is written


# -- the user's own callback objects run, and their state is the user's to read ----------------------------
@pytest.fixture
def atomic_saves(monkeypatch) -> list[str]:
    """Every path the backend hands to checkpoint_io.atomic_save (which still runs)."""
    calls: list[str] = []
    real = checkpoint_io.atomic_save

    def spy(filepath, save, *args, **kwargs):
        calls.append(str(filepath))
        real(filepath, save, *args, **kwargs)

    monkeypatch.setattr(checkpoint_io, "atomic_save", spy)
    return calls


@pytest.mark.usefixtures("single_process")
def test_model_checkpoint_is_the_users_object_and_saves_atomically(tmp_path, atomic_saves):
    distributed = kscale.distribute(tiny_model(lr=0.05), print_plan=False)
    x, y = regression_data(16)
    checkpoint = tf.keras.callbacks.ModelCheckpoint(
        str(tmp_path / "best.keras"), monitor="val_loss", save_best_only=True
    )
    stopping = tf.keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=1e9)
    history = distributed.fit(
        x, y, batch_size=4, epochs=5, validation_data=(x, y), callbacks=[checkpoint, stopping], verbose=0
    )
    assert checkpoint.best < float("inf") and checkpoint.best == pytest.approx(
        min(history.history["val_loss"])
    )
    assert checkpoint.model is distributed
    assert stopping.stopped_epoch == 1  # no epoch improves by 1e9: stops after patience 0
    assert isinstance(history, tf.keras.callbacks.History) and history.model is distributed
    losses = history.history["val_loss"]
    improved = sum(loss < min(losses[:i], default=float("inf")) for i, loss in enumerate(losses))
    assert atomic_saves == [str(tmp_path / "best.keras")] * improved
    assert sorted(os.listdir(tmp_path)) == ["best.keras"]  # no staging folder left behind


class EveryOtherEpoch(tf.keras.callbacks.ModelCheckpoint):
    """A user's subclass with a method of its own, used by its own hook."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.epochs_seen: list[int] = []

    def wanted(self, epoch: int) -> bool:
        return epoch % 2 == 1

    def on_epoch_end(self, epoch, logs=None):
        self.epochs_seen.append(epoch)
        if self.wanted(epoch):
            super().on_epoch_end(epoch, logs)


@pytest.mark.usefixtures("single_process")
def test_a_model_checkpoint_subclass_keeps_its_methods(tmp_path, atomic_saves):
    distributed = kscale.distribute(tiny_model(), print_plan=False)
    mine = EveryOtherEpoch(str(tmp_path / "e{epoch}.h5"), save_weights_only=True)
    distributed.fit(*regression_data(8), batch_size=4, epochs=4, callbacks=[mine], verbose=0)
    assert mine.epochs_seen == [0, 1, 2, 3]
    assert sorted(os.listdir(tmp_path)) == ["e2.h5", "e4.h5"]
    assert atomic_saves == [str(tmp_path / "e2.h5"), str(tmp_path / "e4.h5")]


class SavesTheModel(tf.keras.callbacks.Callback):
    """A user's callback that saves through self.model, as plain Keras code does."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        self.model.save(self.path)


@pytest.mark.parametrize(("worker", "written"), [(0, True), (1, False)])
def test_self_model_save_in_a_users_callback_writes_on_the_chief_only(
    tmp_path, distribute_as_worker, worker, written
):
    distributed = distribute_as_worker(tiny_model(), worker_index=worker)
    target = tmp_path / "model.keras"
    distributed.fit(*regression_data(8), batch_size=2, callbacks=[SavesTheModel(str(target))], verbose=0)
    assert target.exists() is written
    assert [p for p in os.listdir(tmp_path) if ".tmp-" in p] == []


# -- the backends' own callbacks -----------------------------------------------------------------------------
def test_average_metrics_replaces_every_training_value_by_the_backends_average():
    seen = []

    def average(values):
        seen.append(list(values))
        return [v * 10 for v in values]

    logs = {"val_loss": 3.0, "loss": 1.0, "mae": 2.0}
    AverageMetrics(average).on_epoch_end(0, logs)
    assert seen == [[1.0, 2.0]]  # one reduction, in name order (the same on every worker)
    # Validation numbers come from evaluate(), already combined exactly from the metric states.
    assert logs == {"loss": 10.0, "mae": 20.0, "val_loss": 3.0}


def test_average_metrics_takes_the_exact_training_results_of_the_epochs_last_step():
    # Precision is no mean: the backend combines the metric states over workers where the epoch's steps
    # are done (as validation begins, before Keras resets them, else at the epoch's end), once.
    reduced = []

    def reduce_results(model, logs):
        reduced.append(dict(logs))
        return {"precision": 0.5, "loss": 1.5}

    class Model:
        def get_metrics_result(self):
            return {"precision": 0.9, "loss": 1.0}

    for validates in (True, False):
        reduced.clear()
        callback = AverageMetrics(lambda values: [v * 10 for v in values], reduce_results)
        callback.set_model(Model())
        callback.set_params({"steps": 3})
        callback.on_epoch_begin(0)
        for batch in range(3):
            callback.on_train_batch_end(batch, {"precision": 0.9, "loss": 1.0})
        assert reduced == []  # no work per step
        if validates:
            callback.on_test_begin()
        logs = {"precision": 0.9, "loss": 1.0, "mae": 2.0, "val_loss": 3.0}
        callback.on_epoch_end(0, logs)
        assert reduced == [{"precision": 0.9, "loss": 1.0}]  # once, with the epoch's training states
        assert logs == {"precision": 0.5, "loss": 1.5, "mae": 20.0, "val_loss": 3.0}


@pytest.mark.parametrize("is_chief", [True, False])
def test_chief_writes_backup_restores_everywhere_and_writes_on_the_chief_only(tmp_path, is_chief):
    backup_dir = tmp_path / "backup"
    x, y = regression_data(8)
    first = tiny_model(seed=1)
    first.fit(
        x,
        y,
        batch_size=4,
        epochs=2,
        verbose=0,
        callbacks=[tf.keras.callbacks.BackupAndRestore(str(backup_dir), delete_checkpoint=False)],
    )
    before = sorted(os.listdir(backup_dir / "chief"))
    barriers = []
    users = tf.keras.callbacks.BackupAndRestore(str(backup_dir), delete_checkpoint=False)
    wrapped = ChiefWritesBackup(users, is_chief, lambda: barriers.append(1))
    resumed = tiny_model(seed=2)
    history = resumed.fit(x, y, batch_size=4, epochs=4, verbose=0, callbacks=[wrapped])
    assert history.epoch == [2, 3]  # restored from the backup of 2 epochs on every worker
    assert barriers == [1]
    after = sorted(os.listdir(backup_dir / "chief"))
    assert (after != before) is is_chief  # the chief wrote epochs 2 and 3; the others wrote nothing
    assert users.model is resumed  # the user's object did the work


def test_chief_writes_backup_calls_batch_hooks_only_when_the_backup_does(tmp_path):
    per_epoch = ChiefWritesBackup(tf.keras.callbacks.BackupAndRestore(str(tmp_path)), True, lambda: None)
    per_batches = ChiefWritesBackup(
        tf.keras.callbacks.BackupAndRestore(str(tmp_path), save_freq=3), True, lambda: None
    )
    assert not per_epoch._implements_train_batch_hooks()
    assert per_batches._implements_train_batch_hooks()
    assert per_epoch._supports_tf_logs
