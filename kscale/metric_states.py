"""Evaluation that is exact across workers: a metric's result computed from every worker's state (its totals,
counts, true positives...) reduced, as one process given all the data computes it, not a mean of the
workers' results. Shared by every backend and both Keras families; each backend supplies the reduction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def results_from_states(
    model: Any,
    logs: dict,
    reduced_states: Callable[[list], list],
    average: Callable[[list[float]], list[float]],
    to_numpy: Callable[[Any], np.ndarray] = np.array,
    keep_states: bool = False,
) -> dict:
    """`logs` as one process given every worker's data reports them: every metric's state (totals, counts,
    true positives...) replaced by `reduced_states(variables)` (summed over workers, say) and the results
    computed from it, also for AUC, precision or means over parts of different sizes; numbers that are no
    metric's result are `average`d. The model's own metric states are left as they were, or, with
    `keep_states` (after evaluate, which begins from reset states), the reduced ones: the user's metric
    objects then hold what one process's would (`metric.result()` after evaluate). Not after
    `train_on_batch(reset_metrics=False)`, whose next call adds to them: summed again, they would count twice.

    The results are copied (`to_numpy`, a copy on the host) before the states are put back: a result may be
    the state itself (Keras 3 on torch: `TruePositives` returns `accumulator[0]`, a view of its variable,
    which the assignment back would turn into this worker's own count again)."""
    variables = [variable for metric in model.metrics for variable in metric.variables]
    exact: dict = {}
    if variables:
        local = [np.array(variable.numpy()) for variable in variables]
        try:
            for variable, value in zip(variables, reduced_states(variables)):
                variable.assign(value)
            exact = {k: log_value(to_numpy(v)) for k, v in model.get_metrics_result().items() if k in logs}
        finally:
            if not keep_states:
                for variable, value in zip(variables, local):
                    variable.assign(value)
    others = [name for name in logs if name not in exact]
    if others:
        exact.update(zip(others, average([float(logs[name]) for name in others])))
    return {name: log_value(exact[name]) for name in logs}


def log_value(value: Any) -> Any:
    """A metric's result as Keras' logs hold it: a Python float for a scalar, else a numpy array."""
    array = np.asarray(value)
    return array.item() if array.ndim == 0 else array


def reduce_by_aggregation(variables: list, rows: list[np.ndarray]) -> list[np.ndarray]:
    """Each Keras 3 metric state reduced over processes as its variable's aggregation says, from `rows`
    (each variable's values, one row per process): the sum (Keras' default: totals, counts, true
    positives), the mean, or the first process's."""
    reduced = []
    for variable, row in zip(variables, rows):
        aggregation = getattr(variable, "aggregation", "sum")
        if aggregation == "only_first_replica":
            reduced.append(row[0])
        elif aggregation == "mean":
            reduced.append(row.mean(axis=0).astype(row.dtype))
        else:
            reduced.append(row.sum(axis=0))
    return reduced
