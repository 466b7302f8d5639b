"""Average the epoch's training metrics over workers, so every worker's logs (and callbacks) see the same."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf


class AverageMetrics(tf.keras.callbacks.Callback):
    """Replace each value in the epoch's logs by its mean over workers, before other callbacks read them.

    `average` is the backend's reduction (one allreduce of all values, in name order). Like Horovod's
    MetricAverageCallback, but without its `from keras import backend`, which breaks with tf_keras.
    """

    def __init__(self, average: Callable[[list[float]], list[float]]):
        super().__init__()
        self._average = average

    def on_epoch_end(self, epoch, logs=None):
        # Validation numbers come from evaluate(), whose metric states are already combined exactly.
        names = sorted(name for name in logs or () if not name.startswith("val_"))
        if not names:
            return
        logs.update(zip(names, self._average([float(logs[name]) for name in names])))
