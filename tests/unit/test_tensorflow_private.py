"""The private TensorFlow attribute kscale reads (kscale/_tensorflow_private.py), on the installed one."""

from __future__ import annotations

import tensorflow as tf

from kscale import _tensorflow_private, frameworks


def test_tensorflow_says_which_keras_tf_keras_became_once_it_is_used():
    tf.keras.Model  # noqa: B018  (used: TensorFlow >= 2.16 decides here)
    decided = _tensorflow_private.tf_keras_decided(tf)
    if tuple(int(part) for part in tf.__version__.split(".")[:2]) < (2, 16):
        assert decided == "keras_2"
    else:
        assert decided in ("tf_keras", "keras_3"), "TensorFlow renamed its Keras loader's state"
        assert (decided == "tf_keras") == tf.keras.__name__.startswith("tf_keras")
    assert frameworks.tf_keras_is_keras_2()  # lanes A and B train tf.keras


def test_a_batched_dataset_says_its_batch_size_and_samples_through_maps_and_prefetch():
    assert_batched_samples_readable(tf)


def assert_batched_samples_readable(tf) -> None:
    """What kscale reads of a tf.data batch() (also run by tests/keras3 on Keras 3's TensorFlow)."""
    base = tf.data.Dataset.range(38)
    batched = base.batch(16).map(lambda b: b + 1).prefetch(2).cache()
    assert _tensorflow_private.batched_samples(batched) == (16, 38), "tf.data renamed batch()'s state"
    parallel = base.batch(16, num_parallel_calls=2).with_options(tf.data.Options())
    assert _tensorflow_private.batched_samples(parallel) == (16, 38)
    assert _tensorflow_private.batched_samples(base.batch(16, drop_remainder=True)) is None
    assert _tensorflow_private.batched_samples(base.batch(16).shuffle(3)) is None
    assert _tensorflow_private.batched_samples(base) is None


def assert_reshuffling_readable(tf) -> None:
    """What kscale reads of a shuffle()'s reshuffle_each_iteration (also run by tests/keras3 on Keras 3's
    TensorFlow): a refusal rests on it (tf_orders.cut_short)."""
    reshuffles = _tensorflow_private.dataset_reshuffles
    base = tf.data.Dataset.range(16)
    assert reshuffles(base.shuffle(16, seed=3).batch(4)), "tf.data renamed shuffle()'s reshuffle attribute"
    assert reshuffles(base.shuffle(16, seed=3, reshuffle_each_iteration=False).batch(4)) is False
    assert reshuffles(base.batch(4)) is False
    inside = tf.data.Dataset.range(2).interleave(lambda _: base.shuffle(16, seed=5))
    assert reshuffles(inside)  # in interleave's function too


def test_a_shuffle_says_whether_it_reshuffles_every_pass():
    assert_reshuffling_readable(tf)


def test_tensorflow_says_when_a_saved_model_is_being_written(tmp_path):
    """Synchronized batch normalization under Horovod is traced as the layer is while a SavedModel is written."""
    seen = []

    class Traced(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, x):
            seen.append(_tensorflow_private.writing_a_saved_model())
            return x

    tf.saved_model.save(Traced(), str(tmp_path / "saved"))  # traced there, as it is written
    assert seen == [True]
    assert _tensorflow_private.writing_a_saved_model() is False
