"""`kscale.distribute` on one process: the model stays the user's, fit is Keras' fit, the plan is printed once."""

from __future__ import annotations

import copy
import logging
import math
import os

import numpy as np
import pytest
import tensorflow as tf

import kscale
import kscale.learning_rate
import kscale.model_state
from kscale.plan import Plan

from .conftest import regression_data, tiny_model

pytestmark = pytest.mark.usefixtures("single_process")


@pytest.fixture
def kscale_log_to_capsys(monkeypatch):
    """kscale's logger binds sys.stdout when it first prints; give it a fresh handler under capsys."""
    monkeypatch.setattr(logging.getLogger("kscale"), "handlers", [])


def keras_twin(model: tf.keras.Model) -> tf.keras.Model:
    """A plain Keras copy of `model`: same weights, same optimizer settings, same compile arguments."""
    twin = tf.keras.models.clone_model(model)
    twin.set_weights(model.get_weights())
    twin.compile(optimizer=model.optimizer.__class__.from_config(model.optimizer.get_config()), loss="mse")
    return twin


def assert_same_weights(a, b, **tolerance) -> None:
    for left, right in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_allclose(left, right, **tolerance)


# -- distribute() leaves the model alone -----------------------------------------------------------------
def test_single_backend_keeps_the_users_optimizer_and_weights():
    model = tiny_model(lr=0.05)
    optimizer, weights = model.optimizer, model.get_weights()
    distributed = kscale.distribute(model)
    assert distributed is model
    assert distributed.optimizer is optimizer
    assert float(optimizer.learning_rate.numpy()) == pytest.approx(0.05)
    for before, after in zip(weights, model.get_weights(), strict=True):
        np.testing.assert_array_equal(before, after)


def test_the_plan_is_kept_on_the_model():
    distributed = kscale.distribute(tiny_model(lr=0.05))
    plan = distributed.kscale_plan
    assert isinstance(plan, Plan)
    assert (plan.backend, plan.num_workers, plan.num_replicas) == ("single", 1, 1)
    assert plan.learning_rate_before == pytest.approx(0.05)
    assert plan.learning_rate_after == plan.learning_rate_before
    assert plan.lr_factor == 1.0


def test_fit_prints_the_plan_once_and_trains(capsys, kscale_log_to_capsys):
    distributed = kscale.distribute(tiny_model(lr=0.05))
    x, y = regression_data(32)
    first = distributed.fit(x, y, batch_size=8, epochs=5, verbose=0)
    second = distributed.fit(x, y, batch_size=8, epochs=1, verbose=0)
    out = capsys.readouterr().out
    assert out.count("kscale plan") == 1
    assert "backend          single" in out
    assert "per replica 8, global 8" in out
    assert "steps per epoch  (from the data) -> 4" in out
    losses = first.history["loss"]
    assert len(losses) == 5 and losses[-1] < losses[0] / 2
    assert second.history["loss"][0] < losses[0]


def test_print_plan_false_prints_nothing(capsys, kscale_log_to_capsys):
    distributed = kscale.distribute(tiny_model(), print_plan=False)
    distributed.fit(*regression_data(8), batch_size=4, verbose=0)
    assert "kscale plan" not in capsys.readouterr().out


def test_fit_in_one_process_is_keras_fit():
    model = tiny_model(lr=0.05)
    twin = keras_twin(model)
    x, y = regression_data(24)
    ours = kscale.distribute(model, print_plan=False).fit(
        x, y, batch_size=5, epochs=3, shuffle=False, verbose=0
    )
    theirs = twin.fit(x, y, batch_size=5, epochs=3, shuffle=False, verbose=0)
    np.testing.assert_allclose(ours.history["loss"], theirs.history["loss"], rtol=1e-5)
    assert_same_weights(model, twin, rtol=1e-5)


def test_fit_records_batch_epochs_and_steps_in_the_plan():
    distributed = kscale.distribute(tiny_model(), print_plan=False)
    distributed.fit(*regression_data(10), batch_size=4, epochs=2, verbose=0)
    plan = distributed.kscale_plan
    assert (plan.per_replica_batch, plan.global_batch) == (4, 4)
    assert (plan.epochs_before, plan.epochs_after) == (2, 2)
    assert (plan.steps_per_epoch_before, plan.steps_per_epoch_after) == (None, math.ceil(10 / 4))


def test_fit_on_a_dataset_and_a_sequence():
    from .test_tf_data import Batches

    distributed = kscale.distribute(tiny_model(), print_plan=False)
    dataset = tf.data.Dataset.from_tensor_slices(regression_data(12)).batch(4)
    assert len(distributed.fit(dataset, epochs=2, verbose=0).history["loss"]) == 2
    assert distributed.kscale_plan.steps_per_epoch_after == 3
    distributed.fit(Batches(5), verbose=0)
    assert distributed.kscale_plan.steps_per_epoch_after == 5


# -- fit arguments that must mean what they mean in Keras ------------------------------------------------
def test_validation_data_arrays_are_used_with_their_targets():
    model = tiny_model(lr=0.05)
    twin = keras_twin(model)
    x, y = regression_data(16)
    vx, vy = regression_data(8, seed=1)
    ours = kscale.distribute(model, print_plan=False).fit(
        x, y, batch_size=4, validation_data=(vx, vy), shuffle=False, verbose=0
    )
    theirs = twin.fit(x, y, batch_size=4, validation_data=(vx, vy), shuffle=False, verbose=0)
    assert ours.history["val_loss"] == pytest.approx(theirs.history["val_loss"], rel=1e-5)


def test_validation_split_holds_out_the_last_fraction_like_keras():
    model = tiny_model(lr=0.05)
    twin = keras_twin(model)
    x, y = regression_data(20)
    ours = kscale.distribute(model, print_plan=False).fit(
        x, y, batch_size=4, validation_split=0.25, shuffle=False, verbose=0
    )
    theirs = twin.fit(x, y, batch_size=4, validation_split=0.25, shuffle=False, verbose=0)
    assert ours.history["loss"] == pytest.approx(theirs.history["loss"], rel=1e-5)
    assert ours.history["val_loss"] == pytest.approx(theirs.history["val_loss"], rel=1e-5)


def test_initial_epoch_counts_like_keras():
    # Keras: fit(epochs=3, initial_epoch=1) resumes and runs epochs 1 and 2 (epochs is the last index).
    distributed = kscale.distribute(tiny_model(), print_plan=False)
    history = distributed.fit(*regression_data(8), batch_size=4, epochs=3, initial_epoch=1, verbose=0)
    assert history.epoch == [1, 2]


def test_numpy_integer_batch_size_is_accepted_like_keras():
    distributed = kscale.distribute(tiny_model(), print_plan=False)
    history = distributed.fit(*regression_data(8), batch_size=np.int64(4), verbose=0)
    assert distributed.kscale_plan.per_replica_batch == 4
    assert len(history.history["loss"]) == 1


def test_evaluate_gives_keras_numbers():
    model = tiny_model(metrics=["mae"])
    plain = keras_twin(model)  # plain Keras with the same weights (on `single` the model itself is kscale's)
    plain.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    distributed = kscale.distribute(model, print_plan=False)
    x, y = regression_data(12)
    expected = plain.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
    errors = plain.predict(x, verbose=0) - y
    assert expected == pytest.approx({"loss": np.mean(errors**2), "mae": np.mean(np.abs(errors))}, rel=1e-5)
    assert distributed.evaluate(x, y, batch_size=4, verbose=0, return_dict=True) == pytest.approx(expected)
    loss, mae = distributed.evaluate(x, y, batch_size=4, verbose=0)
    assert (loss, mae) == pytest.approx((expected["loss"], expected["mae"]))

    loss_only = kscale.distribute(tiny_model(seed=3), print_plan=False)
    assert isinstance(loss_only.evaluate(x, y, verbose=0), float)


def test_mirrored_on_one_cpu_trains_like_keras():
    model = tiny_model(lr=0.05)
    twin = keras_twin(model)
    x, y = regression_data(16)
    vx, vy = regression_data(8, seed=1)
    distributed = kscale.distribute(model, backend="mirrored", devices=["CPU:0"], print_plan=False)
    assert distributed is not model and type(distributed) is type(model)  # rebuilt inside the scope
    assert distributed.kscale_plan.devices == ("/job:localhost/replica:0/task:0/device:CPU:0",)
    ours = distributed.fit(x, y, batch_size=4, epochs=2, validation_data=(vx, vy), shuffle=False, verbose=0)
    theirs = twin.fit(x, y, batch_size=4, epochs=2, validation_data=(vx, vy), shuffle=False, verbose=0)
    assert ours.history["loss"] == pytest.approx(theirs.history["loss"], rel=1e-5)
    assert ours.history["val_loss"] == pytest.approx(theirs.history["val_loss"], rel=1e-5)
    assert distributed.kscale_plan.steps_per_epoch_after == 4
    # One device replicates nothing: the plan says so, and how to get replicas (#19.7e).
    assert any("MirroredStrategy has one device" in note for note in distributed.kscale_plan.notes)
    assert distributed.evaluate(vx, vy, batch_size=4, verbose=0) == pytest.approx(
        twin.evaluate(vx, vy, batch_size=4, verbose=0), rel=1e-5
    )


def test_a_copy_is_a_plain_keras_model():
    # Keras copies a model through its saved form: the copy is the user's class with the same weights,
    # and none of kscale's methods (it was never distributed).
    distributed = kscale.distribute(tiny_model(), print_plan=False)
    clone = copy.deepcopy(distributed)
    assert type(clone) is type(distributed) and kscale.model_state.state_of(clone) is None
    assert_same_weights(clone, distributed)


@pytest.mark.parametrize("how", ["deepcopy", "copy", "pickle"])
def test_a_copy_holds_the_rate_as_written_and_is_scaled_once_when_distributed(distribute_as_worker, how):
    # The optimizer keeps the rate as written (0.01) and applies it x2: distributing the copy applies
    # 0.01 x 2 again, never 0.04 (issue 19, 7d).
    import pickle

    distributed = distribute_as_worker(tiny_model(lr=0.01))
    assert float(distributed.optimizer.learning_rate.numpy()) == pytest.approx(0.01)
    copies = {"deepcopy": copy.deepcopy, "copy": copy.copy, "pickle": lambda m: pickle.loads(pickle.dumps(m))}
    clone = copies[how](distributed)
    assert float(clone.optimizer.learning_rate.numpy()) == pytest.approx(0.01)
    again = distribute_as_worker(clone)
    assert float(again.optimizer.learning_rate.numpy()) == pytest.approx(0.01)
    assert again.kscale_plan.learning_rate_after == pytest.approx(0.02)


# -- the model stays the model ---------------------------------------------------------------------------
def test_attributes_and_methods_are_the_models(capsys):
    model = tiny_model()
    distributed = kscale.distribute(model, print_plan=False)
    distributed.summary()
    assert model.name in capsys.readouterr().out
    x = regression_data(6)[0]
    np.testing.assert_allclose(
        distributed.predict(x, verbose=0), tf.keras.Sequential.predict(model, x, verbose=0)
    )
    assert repr(distributed) == object.__repr__(distributed)  # Keras' own repr: nothing is wrapped


def test_setting_an_attribute_sets_it_on_the_model():
    distributed = kscale.distribute(tiny_model(), print_plan=False)
    distributed.trainable = False
    assert distributed.trainable_weights == []
    distributed.my_note = "kept"
    assert vars(distributed)["my_note"] == "kept"


def test_only_this_object_changes_not_its_class():
    distributed = kscale.distribute(tiny_model(), print_plan=False)
    other = tiny_model(seed=3)
    assert type(distributed) is type(other) is tf.keras.Sequential
    assert "fit" in vars(distributed) and "fit" not in vars(other)
    assert not hasattr(other, "kscale_plan")


def test_save_and_save_weights_write_atomically_on_the_chief(tmp_path):
    model = tiny_model()
    distributed = kscale.distribute(model, print_plan=False)
    distributed.save(str(tmp_path / "model.keras"))
    distributed.save_weights(str(tmp_path / "weights.h5"))
    assert sorted(os.listdir(tmp_path)) == ["model.keras", "weights.h5"]  # no temporary folders left
    loaded = tf.keras.models.load_model(tmp_path / "model.keras")
    assert_same_weights(loaded, model)


# -- two workers (a stub backend): what each worker trains on --------------------------------------------
def test_each_worker_trains_on_its_own_shard(distribute_as_worker):
    x, y = regression_data(21)
    model = tiny_model(lr=0.05)
    distributed = distribute_as_worker(model, worker_index=1)
    distributed.fit(x, y, batch_size=4, shuffle=False, verbose=0)
    plan = distributed.kscale_plan
    assert plan.steps_per_epoch_after == math.ceil(10 / 4)  # 21 samples: 11 and 10, in 3 steps
    assert plan.notes == (
        "every sample once per epoch: the last step's 5 samples cut in 2 slices, each replica's gradient "
        "weighted by its slice's share",
    )
    assert plan.global_batch == 8
    # Which samples: worker 1 of 2 trains on every second one from index 1 (the stub averages nothing,
    # so it matches plain Keras on exactly those samples at the rate scaled for 2 replicas).
    plain = tiny_model(lr=0.1)
    plain.fit(x[1::2], y[1::2], batch_size=4, shuffle=False, verbose=0)
    assert_same_weights(distributed, plain, rtol=1e-6)


def test_two_workers_apply_the_rate_scaled_and_read_it_as_written(distribute_as_worker):
    model = tiny_model(lr=0.05)
    distributed = distribute_as_worker(model)
    assert float(distributed.optimizer.learning_rate.numpy()) == pytest.approx(0.05)
    assert distributed.kscale_plan.learning_rate_before == pytest.approx(0.05)
    assert distributed.kscale_plan.learning_rate_after == pytest.approx(0.1)
    x, y = regression_data(8)
    before = [w.copy() for w in distributed.get_weights()]
    distributed.train_on_batch(x[:2], y[:2])
    plain = tiny_model(lr=0.1)
    plain.set_weights(before)
    plain.train_on_batch(x[:2], y[:2])
    assert_same_weights(distributed, plain, rtol=1e-6)


def test_warmup_is_set_from_the_steps_per_epoch(distribute_as_worker):
    distributed = distribute_as_worker(tiny_model(lr=0.05), warmup_epochs=2)
    scaling = kscale.model_state.state_of(distributed).rates.scaling
    x, y = regression_data(16)  # 8 per worker, batches of 2: 4 steps per epoch
    distributed.fit(x, y, batch_size=2, verbose=0)
    assert scaling.warmup_steps == 8 and int(scaling.warmup_holder.numpy()) == 8
    assert distributed.kscale_plan.warmup_epochs == 2.0
    assert float(distributed.optimizer.learning_rate.numpy()) == pytest.approx(0.05)


# -- a model built on its first batch (no input shape, as Horovod's examples write it) --------------------
def unbuilt_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(
                4, activation="tanh", kernel_initializer=tf.keras.initializers.GlorotUniform(1)
            ),
            tf.keras.layers.Dense(1, kernel_initializer=tf.keras.initializers.GlorotUniform(2)),
        ]
    )
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


@pytest.mark.parametrize("backend", ["single", "mirrored"])
@pytest.mark.parametrize("data", ["arrays", "dataset"])
def test_a_model_built_on_its_first_batch_trains_like_keras(backend, data):
    x, y = regression_data(16)
    train = (x, y) if data == "arrays" else (tf.data.Dataset.from_tensor_slices((x, y)).batch(4),)
    plain = unbuilt_model()
    plain.fit(*train, batch_size=4 if data == "arrays" else None, epochs=2, shuffle=False, verbose=0)
    options = {"devices": ["CPU:0"]} if backend == "mirrored" else {}
    model = kscale.distribute(unbuilt_model(), backend=backend, print_plan=False, **options)
    assert not model.built  # nothing to build it from yet
    model.fit(*train, batch_size=4 if data == "arrays" else None, epochs=2, shuffle=False, verbose=0)
    if backend == "mirrored":
        assert model.distribute_strategy is not tf.distribute.get_strategy()  # built in the strategy's scope
    assert_same_weights(model, plain, rtol=1e-6)
    assert model.evaluate(x, y, verbose=0) == pytest.approx(plain.evaluate(x, y, verbose=0), rel=1e-6)


def test_a_model_built_on_its_first_batch_predicts_before_any_fit():
    x, _ = regression_data(8)
    model = kscale.distribute(unbuilt_model(), backend="mirrored", devices=["CPU:0"], print_plan=False)
    np.testing.assert_allclose(model.predict(x, verbose=0), unbuilt_model().predict(x, verbose=0), rtol=1e-6)


# -- a model with a compile of its own and optimizers as attributes (keras.io's GAN) ---------------------
class TwoOptimizers(tf.keras.Model):
    """keras.io's GAN shape: no call(), compile(d_optimizer, g_optimizer, loss_fn), two sub-models."""

    def __init__(self):
        super().__init__()
        self.first = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
        self.second = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

    def train_step(self, batch):
        x, y = batch
        for model, optimizer in ((self.first, self.d_optimizer), (self.second, self.g_optimizer)):
            with tf.GradientTape() as tape:
                loss = self.loss_fn(y, model(x))
            optimizer.apply_gradients(
                zip(tape.gradient(loss, model.trainable_weights), model.trainable_weights)
            )
        return {"loss": loss}


def two_optimizers() -> TwoOptimizers:
    kscale.set_seed(0)
    model = TwoOptimizers()
    model.compile(
        tf.keras.optimizers.SGD(0.01), tf.keras.optimizers.Adam(0.002), tf.keras.losses.MeanSquaredError()
    )
    return model


def test_a_compile_of_its_own_signature_is_accepted_and_trains_like_keras():
    x, y = regression_data(16)
    plain = two_optimizers()
    plain.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    model = kscale.distribute(two_optimizers(), print_plan=False)
    model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    assert_same_weights(model, plain, rtol=1e-6)
    assert int(model.d_optimizer.iterations.numpy()) == int(model.g_optimizer.iterations.numpy()) == 8


def test_every_optimizer_the_model_holds_is_scaled_and_in_the_plan(distribute_as_worker):
    users = two_optimizers()
    d_optimizer, g_optimizer = users.d_optimizer, users.g_optimizer
    model = distribute_as_worker(users)
    # the user's own objects, applying their rates x 2 workers, which read as written
    assert model.d_optimizer is d_optimizer and model.g_optimizer is g_optimizer
    assert float(model.d_optimizer.learning_rate.numpy()) == pytest.approx(0.01)
    assert float(model.g_optimizer.learning_rate.numpy()) == pytest.approx(0.002)
    assert kscale.learning_rate.scaling_of(model.g_optimizer).factor == 2.0
    plan = model.kscale_plan
    assert plan.own_optimizers == (("d_optimizer", 0.01, 0.02), ("g_optimizer", 0.002, 0.004))
    assert "learning rate    d_optimizer: 0.01 -> 0.02" in plan.describe()
    assert plan.learning_rate_before is None  # not the placeholder optimizer of super().compile()
    # compiled again with its own signature: the new optimizers are scaled, once
    model.compile(
        tf.keras.optimizers.SGD(0.1), tf.keras.optimizers.SGD(0.3), tf.keras.losses.MeanSquaredError()
    )
    assert model.kscale_plan.own_optimizers == (("d_optimizer", 0.1, 0.2), ("g_optimizer", 0.3, 0.6))
    assert kscale.learning_rate.scaling_of(model.g_optimizer).factor == 2.0


# -- a model class with a fit of its own ---------------------------------------------------------------------
class FitWithKwargs(tf.keras.Sequential):
    def fit(self, *args, **kwargs):
        self.fits = getattr(self, "fits", 0) + 1
        return super().fit(*args, **kwargs)


class FitWithoutKwargs(tf.keras.Sequential):
    def fit(self, x, y, epochs=1, verbose=0):
        return super().fit(x, y, epochs=epochs, verbose=verbose)


@pytest.mark.parametrize("cls", [FitWithKwargs, FitWithoutKwargs])
def test_a_fit_of_the_users_own_runs_or_says_what_it_lacks(distribute_as_worker, cls):
    kscale.set_seed(0)
    model = cls([tf.keras.layers.Dense(1, input_shape=(3,))])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    distributed = distribute_as_worker(model)
    x, y = regression_data(16)
    if cls is FitWithKwargs:  # the override runs, with kscale's arguments passed on to Keras
        history = distributed.fit(x, y, batch_size=4, epochs=2, verbose=0)
        assert distributed.fits == 1 and len(history.history["loss"]) == 2
        assert distributed.kscale_plan.steps_per_epoch_after == 2  # its half of the data
        return
    with pytest.raises(kscale.errors.ModelError) as err:  # never called without kscale's data and callbacks
        distributed.fit(x, y, epochs=2)  # as its own signature takes it
    message = str(err.value)
    # 16 samples in one step of 2 × 32: a dataset of the weighted last step, which takes no batch_size
    assert "FitWithoutKwargs.fit() (your override) takes no callbacks, sample_weight" in message
    assert "**kwargs" in message


def test_the_plan_names_batch_normalization_that_is_not_synchronized(distribute_as_worker):
    """Each replica then normalizes by its own slice's statistics: the plan says so (a tf.keras model loaded
    from a file has lost synchronized=True: tf.keras 2.15 saves no such setting)."""

    def model(synchronized):
        kscale.set_seed(0)
        inner = tf.keras.Sequential(
            [tf.keras.layers.BatchNormalization(synchronized=synchronized, name="bn")]
        )
        built = tf.keras.Sequential(
            [tf.keras.Input((3,)), tf.keras.layers.Dense(4), inner, tf.keras.layers.Dense(1)]
        )
        built.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
        return built

    for synchronized, named in ((False, True), (True, False)):
        distributed = distribute_as_worker(model(synchronized))
        distributed.fit(*regression_data(16), batch_size=4, shuffle=False, verbose=0)
        notes = [note for note in distributed.kscale_plan.notes if note.startswith("BatchNormalization bn:")]
        assert bool(notes) == named


class InterruptInsideEpoch2(tf.keras.callbacks.Callback):
    """Stops fit after batch 3 of epoch 2 (a BackupAndRestore(save_freq=2) has backed up after batch 2)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 1 and batch == 2:
            raise RuntimeError("interrupted")


@pytest.mark.parametrize("backend", ["single", "mirrored"])
def test_a_backup_inside_an_epoch_resumes_at_the_batch_after_it_as_if_never_stopped(backend, tmp_path):
    """tf.keras resumes a save_freq=N backup at its step on the epoch's data from its first batch, its
    metrics from zero; kscale reads the batches the backup had trained first and restores the epoch's
    metric states (kscale/keras2/backup_inside_epoch.py): a tf.data dataset (a strategy reads it as one
    stream of epochs: program backup_inside_an_epoch_dataset) ends as the run never stopped."""
    x, y = regression_data(16)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    devices = {"devices": ["CPU:0"]} if backend == "mirrored" else {}

    def fit(callbacks):
        model = kscale.distribute(tiny_model(metrics=["mae"]), backend=backend, print_plan=False, **devices)
        return model, model.fit(dataset, epochs=3, verbose=0, callbacks=callbacks)

    never_stopped, whole = fit([])
    backup = tf.keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=2)
    with pytest.raises(RuntimeError, match="interrupted"):
        fit([backup, InterruptInsideEpoch2()])
    resumed, history = fit([backup])
    assert resumed.optimizer.iterations.numpy() == 12
    np.testing.assert_allclose(resumed.get_weights()[0], never_stopped.get_weights()[0], atol=1e-6)
    for name in ("loss", "mae"):
        np.testing.assert_allclose(history.history[name], whole.history[name][1:], rtol=1e-5)
    assert not (tmp_path / "backup").exists() or not list((tmp_path / "backup").iterdir())  # all deleted


def test_a_backup_inside_an_epoch_without_its_metric_states_resumes_the_weights_and_says_so(
    tmp_path, capsys, caplog, kscale_log_to_capsys
):
    """A loss between the backup and the record of its epoch's metric states (here: the record deleted):
    the batches are read again all the same, so the weights go on as never stopped; the chief says that the
    epoch's metrics count its batches after the backup only."""
    from kscale.keras2.backup_inside_epoch import RECORD

    x, y = regression_data(16)

    def fit(callbacks):
        model = kscale.distribute(tiny_model(metrics=["mae"]), backend="single", print_plan=False)
        return model, model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0, callbacks=callbacks)

    never_stopped, _ = fit([])
    backup = tf.keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=2)
    with pytest.raises(RuntimeError, match="interrupted"):
        fit([backup, InterruptInsideEpoch2()])
    (tmp_path / "backup" / RECORD).unlink()
    resumed, _ = fit([backup])
    np.testing.assert_allclose(resumed.get_weights()[0], never_stopped.get_weights()[0], atol=1e-6)
    said = capsys.readouterr().out + caplog.text  # kscale's handler, or pytest's where another test left it
    assert "without the epoch's metric states beside the backup" in said, said
