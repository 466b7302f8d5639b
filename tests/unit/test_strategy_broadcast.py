"""kscale.backends._strategy: the first replica's weights, packed into one collective per dtype."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from kscale.backends._strategy import broadcast_from_first_replica, first_replica_arrays


def test_first_replica_arrays_unpacks_every_array_as_it_was():
    rng = np.random.default_rng(0)
    arrays = [
        rng.normal(size=(3, 4)).astype("float32"),
        np.arange(5, dtype="int64"),  # not a float: returned as it is
        rng.normal(size=()).astype("float64"),
        np.zeros((0, 2), "float32"),
        rng.normal(size=(2, 2, 2)).astype("float16"),
        rng.normal(size=(7,)).astype("float32"),
        tf.constant([1.5, -2.0], tf.bfloat16).numpy(),
    ]
    out = first_replica_arrays(tf.distribute.MirroredStrategy(["CPU:0"]), arrays)
    assert len(out) == len(arrays)
    for before, after in zip(arrays, out):
        assert after.dtype == before.dtype and after.shape == before.shape
        np.testing.assert_array_equal(after, before)


def test_broadcast_keeps_the_first_copy_of_sync_on_read_variables():
    """Batch norm's moving statistics are read per replica (not reduced), and written back unchanged."""
    strategy = tf.distribute.MirroredStrategy(["CPU:0"])
    with strategy.scope():
        layer = tf.keras.layers.BatchNormalization()
        layer.build((None, 3))
        layer.moving_mean.assign([1.0, 2.0, 3.0])
    broadcast_from_first_replica(strategy, layer.weights)
    np.testing.assert_array_equal(layer.moving_mean.numpy(), [1.0, 2.0, 3.0])
