"""Combine the epoch's training metrics over workers, so every worker's logs (and callbacks) see the same."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


@functools.cache
def averaging_class(callback_base: type) -> type:
    """AverageMetrics for this Keras family's Callback (tf.keras, or Keras 3 on any backend), made once."""

    class AverageMetrics(_Averaging, callback_base):
        __doc__ = _Averaging.__doc__

    AverageMetrics.__module__ = __name__
    return AverageMetrics


def __getattr__(name: str) -> Any:
    if name == "AverageMetrics":  # the tf.keras one (Horovod's backend), TensorFlow imported on first use
        import tensorflow as tf

        return averaging_class(tf.keras.callbacks.Callback)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Averaging:
    """Replace each value in the epoch's logs by its value over all workers, before other callbacks read them.

    `average` is the backend's reduction (one allreduce of all values, in name order). Like Horovod's
    MetricAverageCallback, but without its `from keras import backend`, which breaks with tf_keras. With
    `reduce_results` (the backend's: metric states summed over workers, results computed from the sums),
    the training metrics are exact: read at the epoch's last step, before validation resets the metrics,
    so precision, recall or AUC over the epoch are what one process computes on all workers' batches, not
    a mean of the workers' values.
    """

    def __init__(
        self,
        average: Callable[[list[float]], list[float]],
        reduce_results: Callable[[Any, dict], dict] | None = None,
    ):
        super().__init__()
        self._average = average
        self._reduce_results = reduce_results
        self._exact: dict = {}

    def on_epoch_begin(self, epoch, logs=None):
        self._exact = {}

    def on_train_batch_end(self, batch, logs=None):
        steps = (self.params or {}).get("steps")
        if self._reduce_results is None or not logs or steps is None or batch + 1 != steps:
            return
        self._exact = self._reduce_results(self.model, dict(logs))

    def on_epoch_end(self, epoch, logs=None):
        # Validation numbers come from evaluate(), whose metric states are already combined exactly.
        names = sorted(name for name in logs or () if not name.startswith("val_"))
        exact = {name: self._exact[name] for name in names if name in self._exact}
        averaged = [name for name in names if name not in exact]
        if averaged:
            logs.update(zip(averaged, self._average([float(logs[name]) for name in averaged])))
        logs.update(exact)
