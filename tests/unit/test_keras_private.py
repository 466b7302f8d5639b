"""Each private Keras attribute kscale reads (kscale/_keras_private.py), checked on the installed Keras.

If a TensorFlow/Keras upgrade renames one of them, these tests fail here, with the name of what moved,
instead of distribute() failing somewhere inside a user's training run.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from kscale import _keras_private


def test_compile_arguments_are_the_objects_compile_was_given():
    loss = lambda y, p: tf.reduce_mean(tf.abs(y - p))  # noqa: E731  (a lambda: get_compile_config cannot serialize it)
    metric = tf.keras.metrics.MeanAbsoluteError()
    optimizer = tf.keras.optimizers.SGD(0.1)
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
    model.compile(
        optimizer=optimizer, loss=loss, metrics=[metric, "mse"], loss_weights=[0.5], run_eagerly=True
    )
    arguments = _keras_private.compile_arguments(model)
    assert arguments["optimizer"] is optimizer
    assert arguments["loss"] is loss
    assert arguments["metrics"][0] is metric and arguments["metrics"][1] == "mse"
    assert arguments["loss_weights"] == [0.5] and arguments["run_eagerly"] is True


def test_compile_arguments_of_an_uncompiled_model_are_empty():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
    assert _keras_private.compile_arguments(model) == {}


def test_learning_rate_object_is_the_schedule_itself():
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    optimizer = tf.keras.optimizers.Adam(schedule)
    assert _keras_private.learning_rate_object(optimizer) is schedule
    assert optimizer.learning_rate is not schedule  # why the private read: the public one is a variable


def test_learning_rate_object_of_a_float_rate_and_of_a_legacy_optimizer():
    assert abs(float(_keras_private.learning_rate_object(tf.keras.optimizers.SGD(0.3)).numpy()) - 0.3) < 1e-7
    legacy = tf.keras.optimizers.legacy.SGD(0.2)
    assert abs(float(tf.keras.backend.get_value(_keras_private.learning_rate_object(legacy))) - 0.2) < 1e-7


class Recorder(tf.keras.callbacks.Callback):
    def __init__(self, batch_hooks: bool):
        super().__init__()
        self.batch_hooks = batch_hooks
        self.batches: list[int] = []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(batch)

    def _implements_train_batch_hooks(self):
        return self.batch_hooks


def test_callback_list_calls_batch_hooks_only_when_a_callback_says_it_has_them():
    quiet = Recorder(batch_hooks=False)
    tf.keras.callbacks.CallbackList([quiet]).on_train_batch_end(0, {})
    assert quiet.batches == []  # a forwarding callback that said "yes" would cost a Python call per step
    busy = Recorder(batch_hooks=True)
    tf.keras.callbacks.CallbackList([quiet, busy]).on_train_batch_end(0, {})
    assert quiet.batches == [0] and busy.batches == [0]
    flags = _keras_private.callback_hook_flags(tf.keras.callbacks.BackupAndRestore("/tmp/unused"))
    assert flags["supports_tf_logs"] is True
    assert flags["train_batch_hooks"]() is False
    assert callable(flags["test_batch_hooks"]) and callable(flags["predict_batch_hooks"])


class Forwarding(_keras_private.AnswersBatchHooksOf, tf.keras.callbacks.Callback):
    def __init__(self, other):
        super().__init__()
        self.other, self.batches = other, []
        _keras_private.answer_batch_hooks_as(self, other)

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(batch)


def test_a_forwarding_callback_answers_keras_batch_hook_questions_as_the_callback_it_forwards_to():
    quiet = Forwarding(Recorder(batch_hooks=False))
    tf.keras.callbacks.CallbackList([quiet]).on_train_batch_end(0, {})
    assert quiet.batches == []
    busy = Forwarding(Recorder(batch_hooks=True))
    tf.keras.callbacks.CallbackList([busy]).on_train_batch_end(0, {})
    assert busy.batches == [0]
    assert Forwarding(tf.keras.callbacks.BackupAndRestore("/tmp/unused"))._supports_tf_logs is True


def test_on_distribution_loss_scaling_sees_keras_divide_its_loss():
    # Keras' compiled loss divides by the replicas through the one module function kscale wraps.
    calls = []
    _keras_private.on_distribution_loss_scaling(tf.keras, lambda: calls.append(1))
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
    model.compile(optimizer="sgd", loss="mse")
    x = tf.ones((2, 3))
    model.compute_loss(x, tf.ones((2, 1)), model(x))
    assert calls


def test_fit_validates_through_evaluate_with_the_flag_kscale_reads():
    seen = []

    class Watch(tf.keras.Sequential):
        def evaluate(self, *args, **kwargs):
            seen.append(_keras_private.is_fit_validation(kwargs))
            return super().evaluate(*args, **kwargs)

    model = Watch([tf.keras.layers.Dense(1, input_shape=(3,))])
    model.compile(optimizer="sgd", loss="mse")
    x, y = tf.ones((4, 3)), tf.ones((4, 1))
    model.fit(x, y, validation_data=(x, y), epochs=1, verbose=0)
    model.evaluate(x, y, verbose=0)
    assert seen == [True, False]


def test_on_distribution_loss_scaling_sees_tensorflow_average_a_loss_over_the_global_batch():
    # tf.nn.compute_average_loss divides by the global batch (the replicas' gradients then add up to their
    # mean): a train_step that uses it must not have its gradients divided again.
    calls = []
    _keras_private.on_distribution_loss_scaling(tf.keras, lambda: calls.append(1))
    assert float(tf.nn.compute_average_loss(tf.constant([1.0, 3.0]))) == 2.0 and calls
    assert tf.nn.compute_average_loss.__name__ == "compute_average_loss"  # wrapped, looks the same


def test_a_loss_object_may_reduce_over_the_replica_batch_in_a_train_step_of_ones_own():
    # tf.keras refuses a default-reduction Loss called under a strategy outside compile; kscale sets the
    # flag Keras' compile sets (its gradients are averaged over the replicas).
    loss = tf.keras.losses.MeanSquaredError()
    y = tf.constant([[1.0], [2.0]])
    with tf.distribute.MirroredStrategy(["CPU:0"]).scope():
        try:
            loss(y, y * 0.5)
        except ValueError as err:
            assert "Reduction" in str(err)
        else:
            raise AssertionError("tf.keras no longer refuses the loss: kscale's flag may be dropped")
        _keras_private.allow_replica_batch_mean(loss)
        assert float(loss(y, y * 0.5)) == 0.625


def test_a_model_built_in_a_strategy_can_forget_it_and_be_told_it_again():
    # tf.keras keeps the strategy a model was built in (public distribute_strategy reads it) and refuses at
    # compile a metric made outside it: the attribute kscale unsets when the process leaves the strategy,
    # and sets on a model made outside whose weights all live in it.
    strategy = tf.distribute.MirroredStrategy(["CPU:0"])
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
    outside_metric = tf.keras.metrics.MeanAbsoluteError()
    assert model.distribute_strategy is strategy
    try:
        model.compile(optimizer="sgd", loss="mse", metrics=[outside_metric])
    except ValueError as err:
        assert "different distribution strategy scope" in str(err)
    else:
        raise AssertionError("tf.keras compiles a metric made outside: unset_models_strategy may be dropped")
    kept = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
    _keras_private.set_model_strategy(kept, strategy)
    _keras_private.unset_models_strategy(strategy, keep=kept)
    assert model.distribute_strategy is not strategy and kept.distribute_strategy is strategy
    model.compile(optimizer="sgd", loss="mse", metrics=[outside_metric])
    _keras_private.set_model_strategy(model, strategy)
    assert model.distribute_strategy is strategy


def test_weights_files_load_under_a_strategy_with_their_arrays_read_whole(tmp_path):
    """tf.keras' `.weights.h5` loading hands metric states h5py datasets, which a variable synchronised on
    read cannot take under a strategy; read whole first, they load (and the store is still Keras')."""
    import numpy as np

    with tf.distribute.MirroredStrategy(["CPU:0"]).scope():
        model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    model.evaluate(np.ones((4, 3)), np.ones((4, 1)), verbose=0)
    path = str(tmp_path / "model.weights.h5")
    model.save_weights(path)
    try:
        model.load_weights(path)
        raise AssertionError("tf.keras loads it now: drop _keras_private.h5_weights_read_whole")
    except TypeError as err:
        assert "Dataset" in str(err)
    with _keras_private.h5_weights_read_whole(tf.keras):
        model.load_weights(path)


def test_fit_iterators_are_the_ones_keras_makes_in_one_process():
    """kscale feeds a strategy the orders one process trains on by drawing as many orders of a seeded
    shuffle as Keras' fit does (KERAS2_FIT_ITERATORS): fails when Keras makes more or fewer iterators."""
    from tests.dataset_passes import orders_fit_trains_on

    iterators = _keras_private.KERAS2_FIT_ITERATORS
    trained, after = orders_fit_trains_on(tf.keras, epochs=3)
    first = iterators.before_first_epoch
    step = 1 + iterators.after_each_epoch
    assert trained == [first, first + step, first + 2 * step]
    assert after == first + 3 * step


def test_synchronized_batch_norm_takes_the_statistics_summed_over_workers():
    """tf.keras' BatchNormalization(synchronized=True) computes its batch statistics in
    `_calculate_mean_and_var`: given the other worker's sums, one worker's layer normalizes and updates its
    moving statistics as the layer does over both workers' batches in one process."""
    import numpy as np

    rng = np.random.default_rng(0)
    first, second = (rng.normal(2.0, 3.0, size=(4, 3, 3, 2)).astype("float32") for _ in range(2))
    whole = tf.keras.layers.BatchNormalization(synchronized=True, momentum=0.5)
    expected = whole(np.concatenate([first, second]), training=True).numpy()[:4]
    other = np.stack([second.sum((0, 1, 2)), (second**2).sum((0, 1, 2)), np.full(2, 36.0)])[
        :, None, None, None
    ]
    layer = tf.keras.layers.BatchNormalization(synchronized=True, momentum=0.5)
    assert _keras_private.sum_batch_statistics_over(layer, lambda local: local + other)
    np.testing.assert_allclose(layer(first, training=True).numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(layer.moving_mean.numpy(), whole.moving_mean.numpy(), atol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), whole.moving_variance.numpy(), atol=1e-4)
    assert not _keras_private.sum_batch_statistics_over(tf.keras.layers.BatchNormalization(), None)
    assert not _keras_private.sum_batch_statistics_over(tf.keras.layers.Dense(1), None)


def test_synchronized_batch_norm_is_saved_as_it_is(tmp_path):
    """A SavedModel traces the layer's own statistics (no sum over workers, whose ops a process without
    Horovod could not load)."""
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.BatchNormalization(synchronized=True)])
    calls = []
    assert _keras_private.sum_batch_statistics_over(model.layers[0], lambda local: calls.append(1) or local)
    model(tf.ones((2, 3)), training=True)
    assert calls == [1]
    tf.saved_model.save(model, str(tmp_path / "tensorflow"))
    model.save(str(tmp_path / "keras"), save_format="tf")
    assert calls == [1]
    tf.keras.models.load_model(str(tmp_path / "keras"))(tf.ones((2, 3)), training=True)


def test_a_legacy_optimizer_reads_its_rate_for_an_update_in_decayed_lr():
    """kscale.keras2.learning_rate multiplies `_decayed_lr` of a legacy optimizer (its update's rate)."""
    assert _keras_private.is_legacy_optimizer_class(tf.keras.optimizers.legacy.SGD)
    assert not _keras_private.is_legacy_optimizer_class(tf.keras.optimizers.SGD)
    optimizer = tf.keras.optimizers.legacy.SGD(0.25)
    rate = _keras_private.legacy_decayed_rate(tf.keras.optimizers.legacy.SGD, optimizer, tf.float32)
    assert abs(float(rate) - 0.25) < 1e-7
    variable = tf.Variable([0.0])
    calls = []

    class Watched(tf.keras.optimizers.legacy.SGD):
        def _decayed_lr(self, var_dtype):
            calls.append(var_dtype)
            return super()._decayed_lr(var_dtype)

    Watched(0.25).apply_gradients([(tf.constant([1.0]), variable)])
    assert calls and abs(float(variable.numpy()[0]) + 0.25) < 1e-7


def test_every_tf_keras_loss_reduces_through_the_function_kscale_wraps(monkeypatch):
    import importlib

    from kscale import loss_reduction

    root = tf.keras.losses.Loss.__module__.split(".")[0]
    module = importlib.import_module(f"{root}.src.utils.losses_utils")
    keras_own = getattr(module.reduce_weighted_loss, "__wrapped__", module.reduce_weighted_loss)
    monkeypatch.setattr(module, "reduce_weighted_loss", keras_own)  # kscale's wrapper put back after
    _keras_private.on_loss_reduction(tf.keras, lambda loss: loss * 3.0, lambda *a: None)
    loss = tf.keras.losses.MeanSquaredError(reduction=tf.keras.losses.Reduction.SUM)
    y = tf.constant([[1.0], [2.0]])
    assert float(loss(y, tf.zeros_like(y))) == 15.0  # (1 + 4) x 3: the wrapper is what the loss calls
    mean = tf.keras.losses.MeanSquaredError()
    assert float(mean(y, tf.zeros_like(y))) == 2.5  # a mean is left alone
    _keras_private.on_loss_reduction(tf.keras, loss_reduction.scaled_sum, loss_reduction.check)
    assert float(loss(y, tf.zeros_like(y))) == 15.0  # wrapped once: the first wrapper stays


def test_tf_keras_refuses_a_stateful_rnn_under_a_strategy_where_kscale_turns_it_into_its_own_error(
    monkeypatch,
):
    import pytest

    from kscale.errors import BackendError

    rnn = tf.keras.layers.RNN
    monkeypatch.setattr(rnn, "__init__", getattr(rnn.__init__, "__wrapped__", rnn.__init__))  # Keras' own
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope(), pytest.raises(ValueError, match=r"^Stateful RNNs"):
        tf.keras.layers.LSTM(2, stateful=True)
    _keras_private.on_stateful_rnn_refused(tf.keras, lambda name: BackendError(f"refused {name}"))
    with strategy.scope(), pytest.raises(BackendError, match="refused lstm_a"):
        tf.keras.layers.LSTM(2, stateful=True, name="lstm_a")
    assert tf.keras.layers.LSTM(2, stateful=True).stateful  # outside a strategy: as Keras makes it


def test_array_orders_are_the_orders_fit_trains_on_in_one_process():
    import numpy as np

    seen = []

    class Recording(tf.keras.Model):
        def train_step(self, data):
            _, y = data
            return {"r": tf.py_function(lambda t: seen.extend(t.numpy().tolist()) or 0, [y], tf.int64)}

    def train(epochs: int) -> None:
        inputs = tf.keras.Input((1,))
        model = Recording(inputs, tf.keras.layers.Dense(1)(inputs))
        model.compile(optimizer="sgd", loss="mse")
        model.fit(
            np.arange(10, dtype="float32")[:, None], np.arange(10), batch_size=4, epochs=epochs, verbose=0
        )

    tf.random.set_seed(3)
    train(3)
    tf.random.set_seed(3)
    orders, after = _keras_private.array_orders(tf.keras, 10, 4, 3, True)
    assert after is None and orders.tolist() == np.reshape(seen, (3, 10)).tolist()
    assert len({tuple(order) for order in orders.tolist()}) == 3  # tf.keras draws a new order each epoch


def test_batch_orders_are_the_orders_fit_takes_a_sequences_batches_in():
    """tf.keras shuffles a Sequence's batches with Python's `random` each epoch."""
    import random

    import numpy as np

    seen = []

    class Batches(tf.keras.utils.Sequence):
        def __len__(self):
            return 10

        def __getitem__(self, index):
            return np.full((4, 1), index, "float32"), np.full((4, 1), index, "float32")

    class Recording(tf.keras.Model):
        def train_step(self, data):
            _, y = data
            return {"r": tf.py_function(lambda t: seen.append(int(t.numpy()[0, 0])) or 0, [y], tf.int64)}

    inputs = tf.keras.Input((1,))
    model = Recording(inputs, tf.keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    random.seed(5)
    model.fit(Batches(), epochs=3, verbose=0)
    random.seed(5)
    orders, after = _keras_private.batch_orders(tf.keras, 10, 3)
    assert orders.tolist() == np.reshape(seen, (3, 10)).tolist()

    # EarlyStopping ends fit after 2 epochs of 4: fit drew 2 orders, and `after(2)` leaves `random` so
    random.seed(5)
    stop = tf.keras.callbacks.EarlyStopping(monitor="r", min_delta=1e9, patience=0)
    model.fit(Batches(), epochs=4, verbose=0, callbacks=[stop])
    assert len(model.history.epoch) == 2
    after_fit = random.getstate()
    random.seed(5)
    _, after = _keras_private.batch_orders(tf.keras, 10, 4)
    after(2)
    assert random.getstate() == after_fit


def test_tf_keras_resumes_a_backup_inside_an_epoch_after_the_batch_kscale_sets(tmp_path):
    """restored_backup_position reads the epoch and batch of the backup BackupAndRestore restored, and
    resume_after_batch moves where the fit about to start resumes (kscale/keras2/backup_inside_epoch.py)."""
    x = np.arange(5, dtype="float32").reshape(5, 1)

    def compiled() -> tf.keras.Model:
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(1,))])
        model.compile("sgd", "mse")
        return model

    def backup() -> tf.keras.callbacks.BackupAndRestore:
        return tf.keras.callbacks.BackupAndRestore(str(tmp_path), save_freq=2, delete_checkpoint=False)

    seen: dict = {}

    class Probe(tf.keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen["restored"] = _keras_private.restored_backup_position(self.model)
            if seen["restored"] is not None:
                _keras_private.resume_after_batch(self.model, 1)

        def on_train_batch_begin(self, batch, logs=None):
            seen.setdefault("first", batch)

    compiled().fit(x, x, batch_size=1, epochs=1, verbose=0, callbacks=[backup(), Probe()])
    assert seen == {"restored": None, "first": 0}  # nothing to restore: none
    seen.clear()
    # The first fit backed up after batches 1 and 3 of its 5 (save_freq=2): tf.keras alone resumes at 4.
    compiled().fit(x, x, batch_size=1, epochs=1, verbose=0, callbacks=[backup(), Probe()])
    assert seen == {"restored": (0, 3), "first": 2}
