"""Several processes, each on its own devices, Keras 3 on TensorFlow: `MultiWorkerMirroredStrategy`.

Keras 3's TensorFlow trainer fails in fit under this strategy (keras-team/keras#20585): kscale corrects the
two places where, in kscale._keras_private, while this backend runs Keras' fit, *_on_batch and predict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kscale import _keras_private
from kscale.backends._strategy import MultiWorker
from kscale.keras3.family import Keras3Family, Keras3Options


class Keras3MultiWorkerBackend(MultiWorker):
    name = "multi_worker"
    Family = Keras3Family
    Options = Keras3Options
    # Evaluation runs on the model itself, in the strategy, every replica fed uneven parts to the last
    # sample (StrategyBackend.evaluate), as tf.keras does
    uneven_evaluation = True

    def predict(
        self, model: Any, method: str, keras_method: Callable[..., Any], arguments: dict, options: Any
    ) -> Any:
        with _keras_private.keras3_strategy_fixed():
            return super().predict(model, method, keras_method, arguments, options)
