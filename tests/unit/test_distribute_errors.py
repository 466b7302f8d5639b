"""Bad inputs to `kscale.distribute` and to fit: each a KScaleError subclass that names the problem and fix."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import kscale
from kscale.errors import DataError, KScaleError, ModelError, OptionError

from .conftest import regression_data, tiny_model
from .test_distributed_model import assert_same_weights
from .test_tf_data import Batches

pytestmark = pytest.mark.usefixtures("single_process")


class LinearRegression:
    """Looks like an sklearn estimator: fit/predict, but no Keras model."""

    def fit(self, x, y):
        return self

    def predict(self, x):
        return x


class NoConfig(tf.keras.Model):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def call(self, inputs):
        return self.layer(inputs)


def message_of(excinfo) -> str:
    assert isinstance(excinfo.value, KScaleError)
    return str(excinfo.value)


# -- the model -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("thing", "named"), [({"layers": []}, "builtins.dict"), (LinearRegression(), "LinearRegression")]
)
def test_not_a_keras_model(thing, named):
    with pytest.raises(ModelError) as err:
        kscale.distribute(thing)
    message = message_of(err)
    assert "takes a Keras model" in message and named in message
    assert "tf.keras.Sequential" in message


def test_model_not_compiled():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
    with pytest.raises(ModelError) as err:
        kscale.distribute(model)
    message = message_of(err)
    assert f"model {model.name!r} is not compiled" in message
    assert "model.compile(optimizer=" in message


# -- options ---------------------------------------------------------------------------------------------
def test_unknown_option_name_lists_the_valid_ones():
    with pytest.raises(OptionError) as err:
        kscale.distribute(tiny_model(), learning_rate=0.1)
    message = message_of(err)
    assert "unknown option(s) 'learning_rate'" in message
    for option in ("lr_scaling", "data_policy", "batch_semantics", "warmup_epochs", "backend"):
        assert option in message
    assert "horovod: backward_passes_per_step, compression, elastic_commit_batches, split_predict" in message


@pytest.mark.parametrize(
    ("option", "value", "valid"),
    [
        ("lr_scaling", "cubic", "'linear', 'sqrt', 'none'"),
        ("data_policy", "random", "'shard', 'every_sample', 'divide_epochs', 'none'"),
        ("batch_semantics", "total", "'per_replica', 'global'"),
    ],
)
def test_unknown_option_values_list_the_valid_ones(option, value, valid):
    with pytest.raises(OptionError) as err:
        kscale.distribute(tiny_model(), **{option: value})
    message = message_of(err)
    assert f"{option}={value!r} is not a valid choice" in message
    assert valid in message


@pytest.mark.parametrize("warmup", [-1, -0.5, "2"])
def test_warmup_epochs_must_be_a_non_negative_number(warmup):
    with pytest.raises(OptionError) as err:
        kscale.distribute(tiny_model(), warmup_epochs=warmup)
    assert f"warmup_epochs={warmup!r} must be a number >= 0" in message_of(err)


def test_unknown_backend_name():
    with pytest.raises(OptionError) as err:
        kscale.distribute(tiny_model(), backend="tpu")
    message = message_of(err)
    assert "unknown backend 'tpu'" in message
    assert "'horovod'" in message and "'single'" in message and "'mirrored'" in message
    assert kscale.backends._current is None


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("compression", "zstd", "compression='zstd'"),
        ("backward_passes_per_step", 0, "backward_passes_per_step=0"),
        ("split_predict", "yes", "split_predict='yes'"),
        ("elastic_commit_batches", 0, "elastic_commit_batches=0"),
    ],
)
def test_horovod_options_are_checked_in_single_process_mode_too(option, value, named):
    # The same script must fail the same way on a laptop as under horovodrun; today the single
    # backend ignores these options and the mistake shows up only on the cluster.
    with pytest.raises(OptionError) as err:
        kscale.distribute(tiny_model(), backend="single", **{option: value})
    assert named in message_of(err)


def test_horovod_only_options_are_refused_by_other_backends():
    with pytest.raises(OptionError) as err:
        kscale.distribute(tiny_model(), backend="single", compression="fp16")
    message = message_of(err)
    assert "compression is an option of the 'horovod' backend" in message
    assert "runs the 'single' backend" in message


def test_subclassed_model_without_config_under_a_strategy_backend():
    model = NoConfig(tf.keras.layers.Dense(1))
    model(np.zeros((1, 3), "float32"))
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ModelError) as err:
        kscale.distribute(model, backend="mirrored", devices=["CPU:0"])
    message = message_of(err)
    assert "NoConfig" in message and "get_config()" in message
    assert "with kscale.scope():" in message


# -- batch size ------------------------------------------------------------------------------------------
def test_global_batch_smaller_than_the_replicas(distribute_as_worker):
    model = distribute_as_worker(tiny_model(), batch_semantics="global")
    with pytest.raises(DataError) as err:
        model.fit(*regression_data(8), batch_size=1, verbose=0)
    message = message_of(err)
    assert "global batch_size=1 cannot be split evenly over 2 replicas" in message
    assert "multiple of 2 (e.g. 2)" in message and "batch_semantics='per_replica'" in message


def test_global_batch_not_divisible_by_the_replicas(distribute_as_worker):
    model = distribute_as_worker(tiny_model(), batch_semantics="global")
    x, y = regression_data(12)
    with pytest.raises(DataError, match=r"multiple of 2 \(e.g. 4\)"):
        model.fit(x, y, batch_size=5, verbose=0)
    model.fit(x, y, batch_size=6, verbose=0)
    assert (model.kscale_plan.per_replica_batch, model.kscale_plan.global_batch) == (3, 6)


def test_global_batch_too_small_in_fit(distribute_as_worker):
    model = distribute_as_worker(tiny_model(), batch_semantics="global")
    x, y = regression_data(8)
    with pytest.raises(DataError, match="cannot be split evenly over 2 replicas"):
        model.fit(x, y, batch_size=1, verbose=0)


def test_per_replica_batch_is_kept(distribute_as_worker):
    model = distribute_as_worker(tiny_model())
    x, y = regression_data(64)
    model.fit(x, y, batch_size=3, verbose=0)
    assert (model.kscale_plan.per_replica_batch, model.kscale_plan.global_batch) == (3, 6)
    model.fit(x, y, verbose=0)
    assert model.kscale_plan.per_replica_batch == 32  # Keras' default batch


@pytest.mark.parametrize("batch", [0, -4, 2.5, "8"])
def test_batch_size_must_be_a_positive_integer(batch):
    model = kscale.distribute(tiny_model(), print_plan=False)
    x, y = regression_data(8)
    with pytest.raises(OptionError, match=r"must be a positive integer"):
        model.fit(x, y, batch_size=batch, verbose=0)


# -- too little data for the workers ---------------------------------------------------------------------
def test_one_sample_for_two_workers(distribute_as_worker):
    model = distribute_as_worker(tiny_model())
    x, y = regression_data(1)
    with pytest.raises(DataError) as err:
        model.fit(x, y, batch_size=1, verbose=0)
    message = message_of(err)
    assert "training data has 1 sample(s), fewer than the 2 workers" in message
    assert "or run on fewer workers" in message


def test_one_batch_dataset_for_two_workers(distribute_as_worker):
    model = distribute_as_worker(tiny_model())
    dataset = tf.data.Dataset.from_tensor_slices(regression_data(4)).batch(4)
    with pytest.raises(DataError, match=r"training data has 1 batch\(es\), fewer than the 2 workers"):
        model.fit(dataset, verbose=0)


def test_one_batch_sequence_for_two_workers(distribute_as_worker):
    model = distribute_as_worker(tiny_model())
    with pytest.raises(DataError, match=r"Sequence has 1 batch\(es\), fewer than the 2 workers"):
        model.fit(Batches(1), verbose=0)


def test_validation_data_too_small_for_two_workers(distribute_as_worker):
    model = distribute_as_worker(tiny_model())
    x, y = regression_data(8)
    vx, vy = regression_data(1)
    with pytest.raises(DataError, match=r"validation data has 1 sample\(s\), fewer than the 2 workers"):
        model.fit(x, y, batch_size=2, validation_data=(vx, vy), verbose=0)


# -- steps that the data cannot supply -------------------------------------------------------------------
def test_steps_per_epoch_beyond_the_data_in_one_process():
    model = kscale.distribute(tiny_model(), print_plan=False)
    x, y = regression_data(8)
    with pytest.raises(DataError) as err:
        model.fit(x, y, batch_size=2, steps_per_epoch=5, verbose=0)
    message = message_of(err)
    assert "asks each worker for 5 steps" in message
    assert "data_policy='shard' each worker's part has only 4 batch(es)" in message
    assert "Lower steps_per_epoch" in message


def test_evaluation_steps_beyond_the_data_stop_where_it_ends_as_in_keras():
    x, y = regression_data(8)
    vx, vy = regression_data(6)  # 3 batches of 2
    plain = tiny_model()
    plain_history = plain.fit(x, y, batch_size=2, validation_data=(vx, vy), validation_steps=5, verbose=0)
    model = kscale.distribute(tiny_model(), print_plan=False)
    history = model.fit(x, y, batch_size=2, validation_data=(vx, vy), validation_steps=5, verbose=0)
    assert history.history["val_loss"] == pytest.approx(plain_history.history["val_loss"], rel=1e-6)
    assert model.evaluate(vx, vy, batch_size=2, steps=7, verbose=0) == pytest.approx(
        plain.evaluate(vx, vy, batch_size=2, verbose=0), rel=1e-6
    )


def test_steps_per_epoch_beyond_a_shard(distribute_as_worker):
    model = distribute_as_worker(tiny_model())
    x, y = regression_data(16)  # 8 samples per worker, 4 batches of 2
    with pytest.raises(DataError, match=r"asks each worker for 5 steps .* only 4 batch\(es\)"):
        model.fit(x, y, batch_size=2, steps_per_epoch=10, verbose=0)  # 10 // 2 replicas = 5 > 4
    history = model.fit(x, y, batch_size=2, steps_per_epoch=8, verbose=0)  # 8 // 2 = 4: fits
    assert model.kscale_plan.steps_per_epoch_after == 4
    assert len(history.history["loss"]) == 1


def test_steps_per_epoch_under_divide_epochs_are_not_divided(distribute_as_worker):
    model = distribute_as_worker(tiny_model(), data_policy="divide_epochs")
    x, y = regression_data(16)  # every worker keeps all 16 samples: 8 batches of 2
    with pytest.raises(DataError, match=r"data_policy='divide_epochs' each worker's part has only 8"):
        model.fit(x, y, batch_size=2, steps_per_epoch=10, verbose=0)


def test_steps_per_epoch_below_the_replicas_under_shard(distribute_as_worker):
    model = distribute_as_worker(tiny_model())
    x, y = regression_data(16)
    with pytest.raises(DataError) as err:
        model.fit(x, y, batch_size=2, steps_per_epoch=1, verbose=0)
    assert "steps_per_epoch=1 is smaller than the 2 replicas" in message_of(err)


def test_dataset_of_unknown_length_on_two_workers_is_counted_once(distribute_as_worker):
    """A file reader's or filter's dataset does not know its length: kscale reads it once to count the
    batches (the workers must run the same steps), takes this worker's half, and the plan says so."""
    model = distribute_as_worker(tiny_model())
    x, y = regression_data(16)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(2)
    history = model.fit(dataset, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    assert model.kscale_plan.steps_per_epoch_after == 4  # 8 batches, worker 0's half
    assert int(model.optimizer.iterations.numpy()) == 8
    assert any("counted by reading it once (8 batches)" in note for note in model.kscale_plan.notes)


# -- data kscale cannot split ----------------------------------------------------------------------------
def test_a_generator_of_samples_on_two_workers_says_to_batch_them(distribute_as_worker):
    model = distribute_as_worker(tiny_model())
    x, y = regression_data(8)
    samples = ((x[i], y[i]) for i in range(8))  # one sample at a time: no batch to hand a replica
    with pytest.raises(DataError) as err:
        model.fit(samples, steps_per_epoch=2, verbose=0)
    message = message_of(err)
    assert "not a batch" in message and "from_generator(...).batch(batch_size)" in message


def test_a_generator_of_batches_on_two_workers_gives_worker_r_batches_r_r_plus_2(distribute_as_worker):
    x, y = regression_data(16)
    distributed = distribute_as_worker(tiny_model(lr=0.05), worker_index=1)
    batches = ((x[i : i + 2], y[i : i + 2]) for i in range(0, 16, 2))
    distributed.fit(batches, steps_per_epoch=8, verbose=0)  # 8 batches of 2: 4 steps of 2 batches
    assert distributed.kscale_plan.steps_per_epoch_after == 4
    # The stub averages nothing: worker 1 trains on batches 1, 3, 5, 7 at the rate scaled for 2 replicas
    plain = tiny_model(lr=0.1)
    odd = np.concatenate([np.arange(i, i + 2) for i in range(2, 16, 4)])
    plain.fit(x[odd], y[odd], batch_size=2, shuffle=False, verbose=0)
    assert_same_weights(distributed, plain, rtol=1e-6)


def test_no_training_data():
    model = kscale.distribute(tiny_model(), print_plan=False)
    with pytest.raises(DataError, match="no training data given"):
        model.fit(None, verbose=0)


def test_targets_beside_a_dataset():
    model = kscale.distribute(tiny_model(), print_plan=False)
    x, y = regression_data(4)
    with pytest.raises(DataError, match=r"y and sample_weight must be inside a tf\.data\.Dataset"):
        model.fit(tf.data.Dataset.from_tensor_slices(x).batch(2), y, verbose=0)
