import pytest
import tensorflow as tf
from tensorflow.python.util import function_utils

from kscale.errors import KScaleError, OptionError
from kscale.estimator import is_chief, shard_dataset, sharded_input_fn


def values(dataset: tf.data.Dataset) -> list[int]:
    return [int(x) for x in dataset.as_numpy_iterator()]


def test_single_process_leaves_the_dataset_alone():
    dataset = tf.data.Dataset.range(5)
    assert shard_dataset(dataset) is dataset
    assert is_chief()


def test_explicit_shards_are_disjoint_and_cover_everything():
    dataset = tf.data.Dataset.range(10)
    shards = [values(shard_dataset(dataset, 3, i)) for i in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


def test_default_shard_is_this_ranks(fake_workers):
    fake_workers(rank=1, size=2)
    assert values(shard_dataset(tf.data.Dataset.range(6))) == [1, 3, 5]
    assert not is_chief()


def test_bad_shard_index():
    with pytest.raises(OptionError):
        shard_dataset(tf.data.Dataset.range(4), num_shards=2, index=2)


def test_sharded_input_fn_keeps_the_signature_the_estimator_reads(fake_workers):
    def input_fn(params, mode=None):
        return tf.data.Dataset.range(params["n"])

    wrapped = sharded_input_fn(input_fn)
    # tf.estimator decides what to pass from these names; a bare *args wrapper would get no params.
    assert function_utils.fn_args(wrapped) == ("params", "mode")
    assert wrapped.__name__ == "input_fn"
    assert values(wrapped(params={"n": 4})) == [0, 1, 2, 3]
    fake_workers(rank=1, size=2)
    assert values(wrapped(params={"n": 4})) == [1, 3]


def test_sharded_input_fn_trains_an_estimator(tmp_path):
    def input_fn(params):
        features = {"x": tf.constant([[1.0], [2.0], [3.0], [4.0]])}
        return tf.data.Dataset.from_tensor_slices(
            (features, tf.constant([[2.0], [4.0], [6.0], [8.0]]))
        ).batch(params["batch_size"])

    def model_fn(features, labels, mode, params):
        predictions = tf.compat.v1.layers.dense(features["x"], 1)
        loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    estimator = tf.estimator.Estimator(model_fn, str(tmp_path), params={"batch_size": 2})
    estimator.train(sharded_input_fn(input_fn), max_steps=2)
    assert estimator.get_variable_value("global_step") == 2


def test_sharded_input_fn_needs_a_dataset():
    with pytest.raises(KScaleError, match=r"tf\.data\.Dataset"):
        sharded_input_fn(lambda: (tf.constant(1), tf.constant(2)))()
