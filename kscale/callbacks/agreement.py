"""The agreement check as a Keras callback, for either Keras family (kscale.agreement has the logic)."""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import numpy as np

from kscale import agreement

#: The share of training time the check may take: where one check costs more than this share of an epoch
#: (short epochs of a big model), it runs every few epochs instead of every one.
CHECK_BUDGET = 0.01


@functools.cache
def _callback_class(callback_base: type) -> type:
    """A subclass of this Keras family's Callback (tf.keras or Keras 3), made once per family."""

    class AgreementCheck(callback_base):
        """At epoch ends, give every worker the workers' mean of the state each updates from its own
        batches, then stop every worker with RanksDivergedError if their weights differ.

        Every epoch end, unless the check costs more than 1% of an epoch (a big model's short epochs):
        then every few, as many as keep it under 1%, and always at the last epoch's end and where
        training ends. The chief decides, from its own timing, at each check, which epoch is checked
        next, and every worker reads that from the same gather: they all take part in the same checks."""

        def __init__(self, backend: Any):
            super().__init__()
            self._backend = backend
            self._next = 0
            self._last = time.perf_counter()
            self._checked: int | None = None
            self._ended: int | None = None

        def on_train_begin(self, logs=None):
            self._next, self._last, self._checked, self._ended = 0, time.perf_counter(), None, None

        def on_epoch_end(self, epoch, logs=None):
            self._ended = epoch
            final = epoch + 1 >= (self.params or {}).get("epochs", epoch + 1)
            if epoch >= self._next or final:
                self._check(epoch)

        def on_train_end(self, logs=None):
            if self._ended is not None and self._checked != self._ended:  # stopped early, unchecked
                self._check(self._ended)

        def _check(self, epoch: int) -> None:
            started = time.perf_counter()
            weights = _weights_without_metric_states(self.model)
            # Batch normalization's moving statistics follow each worker's own batches: every worker
            # takes their mean first (they are not the model diverging), as one model trained on all.
            self._backend.agree_on_state([w for w in weights if not w.trainable and _is_float(w)])
            prints = agreement.fingerprint(self._backend.local_values(weights))
            cost = time.perf_counter() - started
            epochs = max(1, epoch - (self._checked if self._checked is not None else -1))
            per_epoch = max(started - self._last, 1e-9) / epochs
            gap = min(64, max(1, math.ceil(cost / (CHECK_BUDGET * per_epoch))))
            gathered = self._backend.gather(np.append(prints, np.float32(gap)))
            agreement.check(gathered[:, :-1], [getattr(w, "path", None) or w.name for w in weights], epoch)
            self._next, self._checked = epoch + int(gathered[0, -1]), epoch
            self._last = time.perf_counter()

    return AgreementCheck


def _is_float(variable: Any) -> bool:
    return "float" in str(getattr(variable.dtype, "name", variable.dtype))


def _weights_without_metric_states(model: Any) -> list:
    """The model's weights, less the state of its metrics: Keras 2 counts a metric kept as an attribute
    (the guide's `self.loss_tracker`) among `model.weights`, and each worker's metric state is its own."""
    states = {id(v) for metric in model.metrics for v in metric.variables}
    # Arrays only: tf.keras lists a lookup layer's table among the weights as a handler object (no shape)
    return [w for w in model.weights if id(w) not in states and hasattr(w, "shape")]


def agreement_check(backend: Any) -> Any:
    """The callback that compares the workers' weights at epoch ends under `backend`."""
    return _callback_class(backend.family.keras_module().callbacks.Callback)(backend)
