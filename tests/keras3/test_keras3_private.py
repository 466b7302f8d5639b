"""The private Keras 3 attributes kscale reads or sets (kscale/_keras_private.py), checked on the installed
Keras 3: an upgrade that renames one fails here, by name, not inside a user's training run."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from kscale import _keras_private


class UnregisteredMetric(keras.metrics.Metric):
    """A user's Metric subclass, not registered with Keras: its compile config cannot be deserialized."""

    def __init__(self, name: str = "unregistered", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_weight(name="total", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign_add(keras.ops.sum(y_pred))

    def result(self):
        return self.total


def test_clone_uncompiled_copies_a_model_compiled_with_an_unregistered_metric():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse", metrics=[UnregisteredMetric()])
    clone = _keras_private.clone_uncompiled(keras, model)
    assert model.compiled is True and clone.compiled is False  # the attribute Keras' clone_model reads
    assert [w.shape for w in clone.weights] == [w.shape for w in model.weights]
    clone.set_weights(model.get_weights())
    x = np.ones((4, 3), np.float32)
    np.testing.assert_allclose(clone.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)


class UnregisteredLayer(keras.layers.Layer):
    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones")

    def call(self, inputs):
        return inputs * self.scale


def test_clone_uncompiled_copies_a_nested_model_with_an_unregistered_layer():
    # A fine-tuning head around an encoder model, as in examples/: the encoder is copied layer by layer.
    inputs = keras.Input((3,))
    encoder = keras.Model(inputs, UnregisteredLayer()(inputs), name="encoder")
    outer_inputs = keras.Input((3,))
    model = keras.Model(outer_inputs, keras.layers.Dense(1)(encoder(outer_inputs)))
    model.compile(optimizer="sgd", loss="mse")
    clone = _keras_private.clone_uncompiled(keras, model)
    clone.set_weights(model.get_weights())
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(clone.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)


def test_results_in_keras_order_puts_the_loss_first():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    model.evaluate(np.ones((4, 3)), np.ones((4, 1)), verbose=0)
    assert _keras_private.results_in_keras_order(model, {"mae": 2.0, "loss": 1.0}) == [1.0, 2.0]


def test_on_distribution_loss_scaling_sees_keras_divide_its_loss():
    # Keras 3's Loss objects divide their mean by the replicas through the one function kscale wraps.
    calls = []
    _keras_private.on_distribution_loss_scaling(keras, lambda: calls.append(1))
    keras.losses.MeanSquaredError()(np.ones((2, 1), np.float32), np.zeros((2, 1), np.float32))
    assert calls


def test_fit_validates_through_evaluate_with_the_flag_kscale_reads():
    seen = []

    class Watch(keras.Sequential):
        def evaluate(self, *args, **kwargs):
            seen.append(_keras_private.is_fit_validation(kwargs))
            return super().evaluate(*args, **kwargs)

    model = Watch([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((4, 3), np.float32), np.ones((4, 1), np.float32)
    model.fit(x, y, validation_data=(x, y), epochs=1, verbose=0)
    model.evaluate(x, y, verbose=0)
    assert seen == [True, False]


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="Keras 3's TensorFlow trainer: lane C-tf")
def test_the_keras_3_multi_worker_fixes_still_find_the_code_they_correct():
    # keras-team/keras#20585: if a Keras release rewrites these, the fixes in _keras_private must follow.
    import inspect

    from keras.src.backend.tensorflow import trainer

    build = inspect.getsource(trainer.TensorFlowTrainer._maybe_symbolic_build)
    assert (
        "self.distribute_strategy.reduce(" in build and "self._symbolic_build(data_batch=data_batch)" in build
    )
    reduce = inspect.getsource(trainer.reduce_per_replica)
    assert 'strategy.reduce("MEAN", v, axis=0)' in reduce
    assert callable(trainer._collective_all_reduce_multi_worker) and callable(
        trainer._is_per_replica_instance
    )
    # The symbolic build's shapes: the epoch iterator's distributed dataset, a PerReplicaSpec's first spec
    assert "return self._distributed_dataset" in inspect.getsource(trainer.TFEpochIterator._get_iterator)
    import tensorflow as tf
    from tensorflow.python.distribute.values import PerReplicaSpec

    first, second = tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 3], tf.float32)
    assert PerReplicaSpec(first, second)._value_specs == (first, second)
    # Each output's own loss tracker, weighed by the static batch size (None in a strategy's step)
    from keras.src.trainers import compile_utils

    loss_call = inspect.getsource(compile_utils.CompileLoss.call)
    assert "sample_weight=tree.flatten(y_p)[0].shape[0]" in loss_call and "metric.update_state(" in loss_call
    # An epoch's logs read from the metrics only where the step's logs have their names, unflattened
    from keras.src.trainers.trainer import Trainer

    results_or_logs = inspect.getsource(Trainer._get_metrics_result_or_logs)
    assert "set(logs.keys()) == set(" in results_or_logs and "return logs" in results_or_logs
    assert "_get_metrics_result_or_logs" not in trainer.TensorFlowTrainer.__dict__


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="Keras 3's TensorFlow trainer: lane C-tf")
def test_the_keras_3_multi_worker_fixes_hold_only_inside_their_block():
    from keras.src.backend.tensorflow import trainer
    from keras.src.trainers import compile_utils

    def current():
        return (
            trainer.reduce_per_replica,
            trainer.TensorFlowTrainer._maybe_symbolic_build,
            compile_utils.CompileLoss.call,
            trainer.TensorFlowTrainer._get_metrics_result_or_logs,
        )

    keras_own = current()
    with _keras_private.keras3_strategy_fixed():
        fixed = current()
        assert all(mine is not own for mine, own in zip(fixed, keras_own))
        with _keras_private.keras3_strategy_fixed():  # nested (fit validating): the same fixes
            assert current() == fixed
        assert current() == fixed
    assert current() == keras_own


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="Keras 3's TensorFlow trainer: lane C-tf")
def test_an_epochs_logs_are_the_metrics_results_where_a_train_step_nests_them():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae", keras.metrics.RootMeanSquaredError()])
    model.fit(np.ones((4, 2), "float32"), np.zeros((4, 1), "float32"), verbose=0)
    results = model.get_metrics_result()
    nested = {"loss": -1.0, "compile_metrics": {"mae": -1.0, "root_mean_squared_error": -1.0}}
    assert model._get_metrics_result_or_logs(nested) is nested  # Keras' own: the step's numbers
    with _keras_private.keras3_strategy_fixed():
        assert model._get_metrics_result_or_logs(nested) == results
        other = {"loss": -1.0, "compile_metrics": {"mae": -1.0}, "own": -1.0}  # not the metrics' names
        assert model._get_metrics_result_or_logs(other) is other


def test_keras_3_backup_and_restore_still_names_its_files(tmp_path):
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), double_checkpoint=True)
    files = _keras_private.backup_files(backup)
    assert len(files) == 4 and all(str(f).startswith(str(tmp_path / "backup")) for f in files)
    assert files[0].endswith(".weights.h5") and files[1].endswith(".json")


def test_keras_3_backup_and_restore_still_writes_the_epoch_kscale_sets(tmp_path):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=1)
    backup.set_model(model)
    _keras_private.backup_in_epoch(backup, 3)
    backup.on_train_batch_end(0)
    metadata = json.loads((tmp_path / "backup" / "training_metadata.json").read_text())
    assert metadata["epoch"] == 3, metadata


def test_keras_3_backup_and_restore_still_writes_the_batch_kscale_reads(tmp_path):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=2)
    backup.set_model(model)
    assert _keras_private.backup_position(backup) is None  # nothing written yet
    _keras_private.backup_in_epoch(backup, 2)
    for batch in range(6):  # a backup after batches 1, 3 and 5
        backup.on_train_batch_end(batch)
    assert _keras_private.backup_position(backup) == (2, 5)


def test_keras_3_backup_and_restore_still_counts_batches_as_kscale_reads_and_sets(tmp_path):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=3)
    backup.set_model(model)
    written = []
    for batch in range(7):
        backup.on_train_batch_end(batch)
        written.append(_keras_private.backup_written_at_this_batch(backup))
    assert written == [False, False, True, False, False, True, False], written
    # A job resumed after batch 2's backup counts from there: its next backup is after batch 5 again
    resumed = keras.callbacks.BackupAndRestore(str(tmp_path / "resumed"), save_freq=3)
    resumed.set_model(model)
    _keras_private.backup_counts_from(resumed, 2)
    written = []
    for batch in range(3, 7):
        resumed.on_train_batch_end(batch)
        written.append(_keras_private.backup_written_at_this_batch(resumed))
    assert written == [False, False, True, False], written
    assert not _keras_private.backup_written_at_this_batch(
        keras.callbacks.BackupAndRestore(str(tmp_path / "e"))
    )


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="Keras 3's TensorFlow trainer: lane C-tf")
def test_a_keras_whose_trainer_kscale_does_not_know_gets_a_backend_error(monkeypatch):
    from keras.src.backend.tensorflow import trainer

    from kscale.errors import BackendError

    monkeypatch.delattr(trainer, "_collective_all_reduce_multi_worker")
    fixed = _keras_private.keras3_strategy_fixed()
    with pytest.raises(BackendError, match="lacks _collective_all_reduce_multi_worker"), fixed:
        pass


def test_tf_keras_is_keras_3_when_tensorflow_decided_so_before_the_legacy_variable_was_set(monkeypatch):
    # Ray's TensorflowTrainer sets TF_USE_LEGACY_KERAS=1 in workers that already used TensorFlow: tf.keras
    # is Keras 3 all the same, and kscale must not load its Keras 2 modules for it. Without TensorFlow
    # (the JAX and torch lanes) the variable makes nothing Keras 2 either.
    import importlib.util

    from kscale import _tensorflow_private, environment, frameworks

    has_tensorflow = importlib.util.find_spec("tensorflow") is not None
    if has_tensorflow:
        import tensorflow as tf

        tf.keras.Model  # noqa: B018  (TensorFlow decides here, without the variable)
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    environment.reset()
    try:
        if has_tensorflow:
            assert _tensorflow_private.tf_keras_decided(tf) == "keras_3"
        assert not frameworks.tf_keras_is_keras_2()
        assert frameworks.process_keras().generation == 3
    finally:
        monkeypatch.delenv("TF_USE_LEGACY_KERAS")
        environment.reset()


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="Keras 3's TensorFlow trainer: lane C-tf")
def test_a_keras_3_model_keeps_the_strategy_it_was_built_in_where_kscale_sets_it():
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(["CPU:0"])
    with strategy.scope():
        built_inside = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    assert vars(built_inside).get("_distribute_strategy") is strategy
    outside = keras.Sequential([built_inside])
    assert vars(outside).get("_distribute_strategy") is None
    _keras_private.set_keras3_model_strategy(outside, strategy)
    assert outside.distribute_strategy is strategy


@pytest.mark.timeout(240)
@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="Keras 3's TensorFlow trainer: lane C-tf")
def test_a_batched_dataset_says_its_batch_size_and_samples_on_keras_3s_tensorflow():
    import tensorflow as tf

    from tests.unit.test_tensorflow_private import assert_batched_samples_readable

    assert_batched_samples_readable(tf)


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="Keras 3's TensorFlow trainer: lane C-tf")
def test_a_shuffle_says_whether_it_reshuffles_on_keras_3s_tensorflow():
    import tensorflow as tf

    from tests.unit.test_tensorflow_private import assert_reshuffling_readable

    assert_reshuffling_readable(tf)


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="Keras 3's TensorFlow trainer: lane C-tf")
def test_fit_iterators_are_the_ones_keras_makes_in_one_process():
    """kscale feeds a strategy the orders one process trains on by drawing as many orders of a seeded
    shuffle as Keras' fit does (KERAS3_FIT_ITERATORS): fails when Keras makes more or fewer iterators."""
    from tests.dataset_passes import orders_fit_trains_on

    iterators = _keras_private.KERAS3_FIT_ITERATORS
    trained, after = orders_fit_trains_on(keras, epochs=3)
    first = iterators.before_first_epoch
    step = 1 + iterators.after_each_epoch
    assert trained == [first, first + step, first + 2 * step]
    assert after == first + 3 * step


def test_keras_3_optimizers_read_the_rate_they_apply_through_one_method():
    """kscale.keras3.learning_rate multiplies `_get_current_learning_rate` during an update: the rate
    `update_step` gets, weight decay's (torch's too) and the public `learning_rate` all come from it."""
    seen = []

    class Watched(keras.optimizers.SGD):
        def _get_current_learning_rate(self):
            seen.append(True)
            return _keras_private.current_learning_rate(keras.optimizers.SGD, self)

    optimizer = Watched(0.5)
    assert float(keras.ops.convert_to_numpy(optimizer.learning_rate)) == 0.5 and seen
    variable = keras.Variable(np.zeros(1, "float32"))
    seen.clear()
    optimizer.apply_gradients([(keras.ops.ones((1,)), variable)])
    assert seen and float(keras.ops.convert_to_numpy(variable)[0]) == -0.5


def test_every_keras_3_loss_reduces_through_the_function_kscale_wraps(monkeypatch):
    from keras.src.losses import loss as loss_module

    from kscale import loss_reduction

    keras_own = getattr(loss_module.reduce_values, "__wrapped__", loss_module.reduce_values)
    monkeypatch.setattr(loss_module, "reduce_values", keras_own)  # kscale's wrapper put back after
    seen = []
    _keras_private.on_loss_reduction(keras, lambda loss: loss * 3.0, lambda *a: seen.append(a))
    y = np.array([[1.0], [2.0]], "float32")
    summed = keras.losses.MeanSquaredError(reduction="sum")
    assert float(summed(y, np.zeros_like(y))) == 15.0  # (1 + 4) x 3
    assert float(keras.losses.MeanSquaredError()(y, np.zeros_like(y))) == 2.5
    assert ("sum", False) in seen
    _keras_private.on_loss_reduction(keras, loss_reduction.scaled_sum, loss_reduction.check)
    assert float(summed(y, np.zeros_like(y))) == 15.0  # wrapped once


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="Keras 3's TensorFlow optimizer only")
def test_keras_3_tensorflow_optimizers_sum_the_replicas_gradients_after_clipping_them():
    """kscale reduces the gradients before Keras 3 clips them, and makes the method that sums them over a
    strategy's replicas (after clipping) hand them on as they are."""
    import inspect

    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    assert hasattr(TFOptimizer, _keras_private.KERAS3_GRADIENT_ALL_REDUCE)
    source = inspect.getsource(TFOptimizer._backend_update_step)
    assert _keras_private.KERAS3_GRADIENT_ALL_REDUCE in source
    apply_source = inspect.getsource(keras.optimizers.Optimizer._backend_apply_gradients)
    assert apply_source.index("_clip_gradients") < apply_source.index("_backend_update_step")


@pytest.mark.parametrize("built", [False, True], ids=["first-fit", "built"])
def test_array_orders_are_the_orders_fit_trains_on_in_one_process(built):
    """Keras 3 draws each epoch's order of arrays (on JAX from NumPy's generator, on torch from torch's, on
    TensorFlow from its dataset's seeds); before the first fit it peeks at a batch to build the model."""
    seen = []

    def model_recording_targets():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
        step = model.train_step

        def train_step(*args):
            y = args[-1][1]
            seen.extend(np.asarray(keras.ops.convert_to_numpy(y)).ravel().tolist())
            return step(*args)

        model.train_step = train_step
        return model

    x, y = np.arange(10, dtype="float32")[:, None], np.arange(10, dtype="float32")
    keras.utils.set_random_seed(3)
    model = model_recording_targets()
    if built:
        model.evaluate(x, y, verbose=0)  # builds what fit would peek at a batch for
    peeked = _keras_private.fits_after_a_peek(model)
    assert peeked is (not built and keras.backend.backend() != "tensorflow")
    state = _random_state()
    model.fit(x, y, batch_size=4, epochs=3, verbose=0)
    after_fit = _random_state()
    _random_state(state)
    orders, after = _keras_private.array_orders(keras, 10, 4, 3, True, peeked=peeked)
    assert orders.tolist() == np.reshape(seen, (3, 10)).astype(int).tolist()
    if after is not None:
        after(3)
    assert np.array_equal(
        _comparable(_random_state()), _comparable(after_fit)
    )  # the stream goes on as after fit


def _random_state(state=None):
    """The global state Keras' array adapter draws from on this backend (set to `state` if given)."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        return torch.get_rng_state() if state is None else torch.set_rng_state(state)
    if backend == "jax":
        return np.random.get_state() if state is None else np.random.set_state(state)
    return None  # TensorFlow: the orders come from seeds, no state to follow


def _comparable(state) -> np.ndarray:
    if state is None:
        return np.zeros(1)
    return np.asarray(state[1] if isinstance(state, tuple) else state.numpy())


def test_batch_orders_are_the_orders_fit_takes_a_pydatasets_batches_in():
    """Keras 3 shuffles a PyDataset's batches with Python's `random` each epoch (and on JAX and torch once
    more, peeking at a batch to build the model before the first)."""
    import random

    seen = []

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 10

        def __getitem__(self, index):
            return np.full((4, 1), index, "float32"), np.full((4, 1), index, "float32")

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    step = model.train_step

    def train_step(*args):
        seen.append(int(np.asarray(keras.ops.convert_to_numpy(args[-1][1])).ravel()[0]))
        return step(*args)

    model.train_step = train_step
    random.seed(5)
    peeked = _keras_private.fits_after_a_peek(model)
    model.fit(Batches(), epochs=3, verbose=0)
    random.seed(5)
    orders, _ = _keras_private.batch_orders(keras, 10, 3, peeked)
    assert orders.tolist() == np.reshape(seen, (3, 10)).tolist()


@pytest.mark.parametrize("data", ["arrays", "pydataset"])
def test_after_an_early_stop_the_orders_leave_the_random_state_as_fit_of_the_epochs_begun(data):
    """EarlyStopping ends fit after 2 epochs of 4: one process's fit drew the shuffles of 2 epochs (and its
    peek), so the next fit's shuffles come from there; `after(2)` leaves the random state so, where kscale
    drew all 4 epochs' orders (found by generated seed 5044 of C-tf: a second fit after an early stop)."""
    import random

    x, y = np.arange(32, dtype="float32")[:, None], np.arange(32, dtype="float32")

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 8

        def __getitem__(self, index):
            return x[index * 4 : (index + 1) * 4], y[index * 4 : (index + 1) * 4]

    def seeded():
        keras.utils.set_random_seed(7)  # Python's, NumPy's and the backend's generators

    def state():
        numpy_state = np.random.get_state()
        drawn = (random.getstate(), numpy_state[1].tobytes(), numpy_state[2])
        if keras.backend.backend() == "torch":
            import torch

            return (*drawn, torch.get_rng_state().numpy().tobytes())
        return drawn

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    peeked = _keras_private.fits_after_a_peek(model)
    seeded()
    stop = keras.callbacks.EarlyStopping(monitor="loss", min_delta=1e9, patience=0)
    fed = {"x": Batches()} if data == "pydataset" else {"x": x, "y": y, "batch_size": 4}
    model.fit(**fed, epochs=4, verbose=0, callbacks=[stop])
    assert len(model.history.epoch) == 2
    after_fit = state()
    seeded()
    if data == "pydataset":
        _, after = _keras_private.batch_orders(keras, 8, 4, peeked)
    else:
        _, after = _keras_private.array_orders(keras, 32, 4, 4, True, peeked=peeked)
    if after is not None:  # TensorFlow's array orders are seeds: no state to follow
        after(2)
    assert state() == after_fit


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="Keras 3's JAX trainer only")
def test_keras_3_on_jax_lays_an_epochs_batches_out_where_kscale_lays_out_a_whole_last_step():
    """Keras lays every batch of an epoch out as its first (JAXEpochIterator._get_distributed_iterator,
    through `_distribute_data`): kscale's replacement lays a whole last step out on every device, and
    every other batch as Keras does (the conformance programs with a short last step check the rest)."""
    import inspect

    from keras.src.backend.jax import trainer

    source = inspect.getsource(trainer.JAXEpochIterator._get_distributed_iterator)
    assert callable(trainer._distribute_data)
    _keras_private.lay_out_whole_steps(lambda data: False, lambda shape: None)
    assert getattr(trainer.JAXEpochIterator._get_distributed_iterator, "_kscale_whole_steps", False)
    assert "get_data_layout" in source or "is_whole" in source


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="Keras 3's TensorFlow backend only")
def test_keras_3_synchronized_moments_are_summed_in_the_function_kscale_replaces(monkeypatch):
    import inspect

    from keras.src.backend.tensorflow import nn

    monkeypatch.setattr(nn, "_compute_moments_sync", nn._compute_moments_sync)  # Keras' own, back after
    assert "_compute_moments_sync(x, axes, keepdims)" in inspect.getsource(nn.moments)
    assert list(inspect.signature(nn._compute_moments_sync).parameters) == ["x", "axes", "keepdims"]
    _keras_private.weigh_synchronized_moments(lambda tensor: tensor)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    mean, variance = nn.moments(x, axes=[0], synchronized=True)  # no strategy: Keras' own moments
    np.testing.assert_allclose(np.asarray(mean), x.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(variance), x.var(axis=0), rtol=1e-5)


@pytest.mark.skipif(keras.config.backend() != "torch", reason="Keras 3's torch trainer: lane C-torch")
def test_keras_own_torch_data_parallelism_is_where_kscale_switches_it_off():
    """_keras_private.keep_torch_data_parallel_off: every model on torch is a TorchTrainer, and where that
    trainer wraps the model in DistributedDataParallel (Keras' development branch), it wraps only while
    `ddp_model` is None, its steps call `ddp_model` or the model, and it overrides get_metrics_result."""
    import inspect

    from keras.src.backend.torch.trainer import TorchTrainer

    assert isinstance(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]), TorchTrainer)
    if hasattr(TorchTrainer, "_initialize_ddp"):
        assert "self.ddp_model is None" in inspect.getsource(TorchTrainer._initialize_ddp)
        for step in (TorchTrainer.train_step, TorchTrainer.test_step, TorchTrainer.predict_step):
            assert "self.ddp_model or self" in inspect.getsource(step)
        assert "get_metrics_result" in vars(TorchTrainer)


def test_the_losses_a_layer_adds_are_each_threads_own():
    """_keras_private.losses_per_thread: two threads (a MirroredStrategy's replicas) call one layer and meet
    before reading what it added; each reads its own loss only (Keras' own list: the later call clears the
    first one's loss and both read the second's)."""
    import threading

    _keras_private.losses_per_thread(keras)
    meet = threading.Barrier(2, timeout=30)

    class Adds(keras.layers.Layer):
        def call(self, x):
            self.add_loss(keras.ops.sum(x))
            meet.wait()  # both have added before either reads
            return x

    layer, seen = Adds(), {}

    def run(value: float) -> None:
        layer(np.full((1, 1), value, "float32"))
        seen[value] = [float(keras.ops.convert_to_numpy(loss)) for loss in layer.losses]

    threads = [threading.Thread(target=run, args=(value,)) for value in (1.0, 2.0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert seen == {1.0: [1.0], 2.0: [2.0]}
