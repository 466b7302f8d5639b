"""The agreement check as a Keras callback, for either Keras family (kscale.agreement has the logic)."""

from __future__ import annotations

import functools
from typing import Any

from kscale import agreement


@functools.cache
def _callback_class(callback_base: type) -> type:
    """A subclass of this Keras family's Callback (tf.keras or Keras 3), made once per family."""

    class AgreementCheck(callback_base):
        """At every epoch end, give every worker the workers' mean of the state each updates from its own
        batches, then stop every worker with RanksDivergedError if their weights differ."""

        def __init__(self, backend: Any):
            super().__init__()
            self._backend = backend

        def on_epoch_end(self, epoch, logs=None):
            weights = _weights_without_metric_states(self.model)
            # Batch normalization's moving statistics follow each worker's own batches: every worker
            # takes their mean first (they are not the model diverging), as one model trained on all.
            self._backend.agree_on_state([w for w in weights if not w.trainable and _is_float(w)])
            gathered = self._backend.gather(agreement.fingerprint(self._backend.local_values(weights)))
            agreement.check(gathered, [getattr(w, "path", None) or w.name for w in weights], epoch)

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
    """The callback that compares the workers' weights at each epoch end under `backend`."""
    return _callback_class(backend.keras_module().callbacks.Callback)(backend)
