"""kscale.callbacks: which callbacks run on non-chief workers, and checkpoints that save atomically."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from kscale.callbacks import (
    AtomicModelCheckpoint,
    atomic_checkpoint,
    chief_only,
    for_this_worker,
    is_chief_only,
)

from .conftest import regression_data, tiny_model


def file_writers(tmp_path) -> dict[str, tf.keras.callbacks.Callback]:
    return {
        "ModelCheckpoint": tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpt.h5")),
        "TensorBoard": tf.keras.callbacks.TensorBoard(log_dir=str(tmp_path / "logs")),
        "CSVLogger": tf.keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
        "ProgbarLogger": tf.keras.callbacks.ProgbarLogger(),
        "RemoteMonitor": tf.keras.callbacks.RemoteMonitor(),
    }


def everyone() -> dict[str, tf.keras.callbacks.Callback]:
    return {
        "EarlyStopping": tf.keras.callbacks.EarlyStopping(),
        "LambdaCallback": tf.keras.callbacks.LambdaCallback(),
        "ReduceLROnPlateau": tf.keras.callbacks.ReduceLROnPlateau(),
        "TerminateOnNaN": tf.keras.callbacks.TerminateOnNaN(),
    }


def names(callbacks) -> set[str]:
    return {type(cb).__name__ for cb in callbacks}


def test_the_chief_runs_every_callback(tmp_path):
    callbacks = [*file_writers(tmp_path).values(), *everyone().values()]
    kept = for_this_worker(callbacks, is_chief=True)
    assert kept == callbacks and kept is not callbacks


def test_non_chief_workers_drop_file_writers(tmp_path):
    callbacks = [*file_writers(tmp_path).values(), *everyone().values()]
    assert names(for_this_worker(callbacks, is_chief=False)) == set(everyone())


def test_multi_worker_strategy_keeps_the_writers_that_must_run_everywhere(tmp_path):
    writers = file_writers(tmp_path)
    backup = tf.keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    kept = for_this_worker([*writers.values(), backup], is_chief=False, multi_worker_strategy=True)
    assert names(kept) == {"ModelCheckpoint", "TensorBoard", "BackupAndRestore"}
    assert "CSVLogger" not in names(kept)


def test_backup_and_restore_runs_on_every_worker(tmp_path):
    backup = tf.keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    assert for_this_worker([backup], is_chief=False) == [backup]


def test_user_marked_callbacks_run_on_the_chief_only():
    mine = tf.keras.callbacks.LambdaCallback()
    assert not is_chief_only(mine)
    assert chief_only(mine) is mine
    assert is_chief_only(mine) and is_chief_only(mine, multi_worker_strategy=True)
    assert for_this_worker([mine], is_chief=False) == []
    assert for_this_worker([mine], is_chief=False, multi_worker_strategy=True) == []
    assert for_this_worker([mine], is_chief=True) == [mine]


def test_chief_only_is_exported_at_the_top_level():
    import kscale

    assert kscale.chief_only is chief_only


def test_atomic_checkpoint_keeps_the_settings_of_the_original(tmp_path):
    original = tf.keras.callbacks.ModelCheckpoint(
        str(tmp_path / "best-{epoch:02d}.h5"),
        monitor="val_loss",
        save_best_only=True,
        save_weights_only=True,
        mode="min",
        save_freq=5,
        initial_value_threshold=0.5,
    )
    atomic = AtomicModelCheckpoint.from_checkpoint(original)
    assert isinstance(atomic, AtomicModelCheckpoint) and isinstance(
        atomic, tf.keras.callbacks.ModelCheckpoint
    )
    assert atomic is not original
    for attribute in ("filepath", "monitor", "save_best_only", "save_weights_only", "save_freq", "best"):
        assert getattr(atomic, attribute) == getattr(original, attribute), attribute
    assert atomic.monitor_op is original.monitor_op
    assert AtomicModelCheckpoint.from_checkpoint(atomic) is atomic


@pytest.fixture
def atomic_save_calls(monkeypatch) -> list[str]:
    """Record every path AtomicModelCheckpoint hands to atomic_save (which still runs)."""
    calls: list[str] = []
    real = atomic_checkpoint.atomic_save

    def spy(filepath, save):
        calls.append(filepath)
        real(filepath, save)

    monkeypatch.setattr(atomic_checkpoint, "atomic_save", spy)
    return calls


@pytest.mark.parametrize(
    ("filename", "weights_only"), [("model.h5", False), ("weights.h5", True), ("model.keras", False)]
)
def test_atomic_checkpoint_saves_through_atomic_save(tmp_path, atomic_save_calls, filename, weights_only):
    model = tiny_model()
    target = str(tmp_path / filename)
    callback = AtomicModelCheckpoint(target, save_weights_only=weights_only)
    model.fit(*regression_data(8), batch_size=4, epochs=2, callbacks=[callback], verbose=0)
    assert atomic_save_calls == [target, target]
    assert os.listdir(tmp_path) == [filename]  # no staging folder left behind


@pytest.mark.usefixtures("single_process")
def test_distributed_fit_turns_model_checkpoint_atomic(tmp_path, atomic_save_calls):
    import kscale

    distributed = kscale.distribute(tiny_model(), print_plan=False)
    target = str(tmp_path / "epoch-{epoch}.h5")
    user_callback = tf.keras.callbacks.ModelCheckpoint(target)
    distributed.fit(*regression_data(8), batch_size=4, epochs=2, callbacks=[user_callback], verbose=0)
    assert atomic_save_calls == [str(tmp_path / "epoch-1.h5"), str(tmp_path / "epoch-2.h5")]
    assert sorted(os.listdir(tmp_path)) == ["epoch-1.h5", "epoch-2.h5"]


@pytest.mark.parametrize(("worker", "written"), [(0, True), (1, False)])
def test_distributed_fit_writes_logs_on_the_chief_only(tmp_path, distribute_as_worker, worker, written):
    distributed = distribute_as_worker(tiny_model(), worker_index=worker)
    log = tmp_path / "log.csv"
    distributed.fit(
        *regression_data(8), batch_size=2, callbacks=[tf.keras.callbacks.CSVLogger(str(log))], verbose=0
    )
    assert log.exists() is written
