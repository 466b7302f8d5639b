"""The agreement check as a Keras callback, for either Keras family (kscale.agreement has the logic)."""

from __future__ import annotations

import functools
from typing import Any

from kscale import agreement


@functools.cache
def _callback_class(callback_base: type) -> type:
    """A subclass of this Keras family's Callback (tf.keras or Keras 3), made once per family."""

    class AgreementCheck(callback_base):
        """At every epoch end, stop every worker with RanksDivergedError if their weights differ."""

        def __init__(self, backend: Any):
            super().__init__()
            self._backend = backend

        def on_epoch_end(self, epoch, logs=None):
            weights = self._backend.local_weights(self.model)
            gathered = self._backend.gather(agreement.fingerprint(weights))
            agreement.check(
                gathered, [w.path if hasattr(w, "path") else w.name for w in self.model.weights], epoch
            )

    return AgreementCheck


def agreement_check(backend: Any) -> Any:
    """The callback that compares the workers' weights at each epoch end under `backend`."""
    return _callback_class(backend.keras_module().callbacks.Callback)(backend)
