"""Several processes, each on its own devices, Keras 3 on TensorFlow: `MultiWorkerMirroredStrategy`.

Keras 3's TensorFlow trainer fails in fit under this strategy (keras-team/keras#20585): kscale corrects the
two places where, in kscale._keras_private, while this backend runs Keras' fit, *_on_batch and predict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kscale import _keras_private
from kscale.backends._strategy import MultiWorker, sum_over_replicas
from kscale.keras3.family import Keras3Family, Keras3Options


class Keras3MultiWorkerBackend(MultiWorker):
    name = "multi_worker"
    Family = Keras3Family
    Options = Keras3Options
    # Evaluation runs on this process's copy of the model (evaluates_on_copy), fed its whole part; or on
    # the model itself where Keras cannot copy it (StrategyBackend.evaluate)
    uneven_evaluation = True

    def evaluates_on_copy(self) -> bool:
        # Keras 3 reports each output's loss of a batch whose size its trace does not know unweighted (the
        # static batch size is None): exact only on a copy fed as one process is.
        return True

    def predict(
        self, model: Any, method: str, keras_method: Callable[..., Any], arguments: dict, options: Any
    ) -> Any:
        with _keras_private.keras3_strategy_fixed():
            return super().predict(model, method, keras_method, arguments, options)

    def reduced_metric_states(self, variables: list) -> list[np.ndarray]:
        """Each metric state of this worker's copy summed over workers (Keras' default aggregation)."""
        values = [np.asarray(v.numpy()) for v in variables]
        sums = sum_over_replicas(self.strategy, values, every=self.replicas_per_worker)
        return [
            total / self.num_workers if getattr(v, "aggregation", "sum") == "mean" else total
            for v, total in zip(variables, sums)
        ]

    def averaged_numbers(self, values: list[float]) -> list[float]:
        return [float(v) for v in self.mean_over_workers(np.asarray(values, np.float64))]
