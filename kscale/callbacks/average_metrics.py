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
    `reduce_results` (the backend's: metric states combined over workers, results computed from them),
    the training metrics are exact: precision, recall or AUC over the epoch are what one process computes
    on all workers' batches, not a mean of the workers' values. The states are read where the epoch's
    steps are done and before validation resets them: as fit's validation begins (`on_test_begin`, which
    Keras calls before resetting), else at the epoch's end. No batch hook: Keras then calls none per step
    (tf.keras would convert every step's logs to numpy for one, and Keras 3 dispatch them synchronously).
    """

    def __init__(
        self,
        average: Callable[[list[float]], list[float]],
        reduce_results: Callable[[Any, dict], dict] | None = None,
    ):
        super().__init__()
        self._average = average
        self._reduce_results = reduce_results
        self._exact: dict | None = None
        self._in_epoch = False

    def on_epoch_begin(self, epoch, logs=None):
        self._exact, self._in_epoch = None, True

    def _read_exact(self) -> None:
        if self._reduce_results is None or self._exact is not None or not self._in_epoch:
            return
        results = dict(self.model.get_metrics_result())
        self._exact = self._reduce_results(self.model, results) if results else {}

    def on_test_begin(self, logs=None):
        self._read_exact()  # fit's validation: the epoch's training states, before it resets them

    def on_epoch_end(self, epoch, logs=None):
        self._read_exact()
        self._in_epoch = False
        # Validation numbers come from evaluate(), whose metric states are already combined exactly.
        names = sorted(name for name in logs or () if not name.startswith("val_"))
        exact = {name: self._exact[name] for name in names if name in (self._exact or {})}
        averaged = [name for name in names if name not in exact]
        if averaged:
            logs.update(zip(averaged, self._average([float(logs[name]) for name in averaged])))
        logs.update(exact)
