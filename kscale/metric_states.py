"""Metrics that are exact across workers: a metric's result computed from every worker's state (its totals,
counts, true positives...) reduced, as one process given all the data computes it, not a mean of the
workers' results. Shared by every backend and both Keras families; each backend supplies the reduction.

How a state combines over replicas: as its variable's aggregation says (Keras' default for a metric's
state is the sum, right for totals and counts; `mean`, or the first replica's), or as the metric's class
declares with `kscale.combine_states` (a running maximum: `@kscale.combine_states(max_value="max")`).
kscale cannot know how a state it does not know combines: a metric class of the user's that declares
nothing is summed, and the plan and a warning say so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kscale import _keras_private
from kscale.structures import flatten

#: The ways a declared state combines over replicas.
REDUCTIONS = ("sum", "mean", "max", "min", "first")
_DECLARED = "kscale_states"


def combine_states(**reductions: str) -> Callable[[type], type]:
    """Declare how a Metric subclass's states combine over replicas, by the attribute holding each state:

        @kscale.combine_states(max_value="max")
        class RunningMax(keras.metrics.Metric):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.max_value = self.add_variable(shape=(), initializer="zeros", name="max_value")

    "sum" (totals, counts: Keras' default), "mean", "max", "min", or "first" (the first replica's). Every
    backend combines the states so before computing the metric's result, as one process given every
    replica's batches would. States not named keep their variable's aggregation."""
    unknown = {name: how for name, how in reductions.items() if how not in REDUCTIONS}
    if unknown:
        from kscale.errors import OptionError

        raise OptionError(
            f"combine_states: {', '.join(f'{n}={h!r}' for n, h in unknown.items())} is not a way to combine "
            f"states; use one of {', '.join(map(repr, REDUCTIONS))}."
        )

    def declare(cls: type) -> type:
        setattr(cls, _DECLARED, {**getattr(cls, _DECLARED, {}), **reductions})
        return cls

    return declare


def _leaves(metrics: list) -> list:
    """Every metric object in `metrics` and in the containers among them (Keras 3's CompileMetrics)."""
    found, seen = [], set()

    def visit(metric: Any) -> None:
        if id(metric) in seen:
            return
        seen.add(id(metric))
        found.append(metric)
        for child in getattr(metric, "metrics", None) or ():
            if child is not metric:
                visit(child)

    for metric in metrics:
        visit(metric)
    return found


def declared_reductions(metrics: list) -> dict[int, str]:
    """id(state variable) -> its declared reduction, for the metrics whose class declares any."""
    declared: dict[int, str] = {}
    for metric in _leaves(metrics):
        for name, how in getattr(type(metric), _DECLARED, {}).items():
            variable = getattr(metric, name, None)
            if variable is not None:
                declared[id(variable)] = how
    return declared


def reduction_of(variable: Any, declared: dict[int, str]) -> str:
    """How `variable` combines over replicas: declared, else its aggregation (Keras 3's names or
    tf.VariableAggregation's), else a sum."""
    if id(variable) in declared:
        return declared[id(variable)]
    aggregation = str(getattr(variable, "aggregation", "sum") or "sum").lower()
    if "first" in aggregation:
        return "first"
    if "mean" in aggregation:
        return "mean"
    return "sum"


def reduce_rows(row: np.ndarray, how: str) -> np.ndarray:
    """One state's values from every replica (one row each), combined as `how` says."""
    if how == "first":
        return row[0]
    if how == "mean":
        return row.mean(axis=0).astype(row.dtype)
    if how == "max":
        return row.max(axis=0)
    if how == "min":
        return row.min(axis=0)
    return row.sum(axis=0)


def share_of(value: np.ndarray, how: str, holds_all: bool) -> np.ndarray:
    """A replica's share of a state combined over every replica (`how`: reduction_of's), so that the
    replicas' shares combine to `value` again, to the last bit: the one that `holds_all` gets it, every other
    a summed state's zero and any other state's value itself (a mean, a maximum, the first's)."""
    return value if holds_all or how != "sum" else np.zeros_like(value)


def state_variables(model: Any) -> tuple[list, list[str]]:
    """The model's metric state variables, and how each combines over replicas (reduction_of): what a
    backup inside an epoch keeps of the epoch's metrics (both families' backups)."""
    metrics = model.metrics
    variables = [variable for metric in metrics for variable in metric.variables]
    declared = declared_reductions(metrics)
    return variables, [reduction_of(variable, declared) for variable in variables]


def assign_shares(variables: list, values: list, reductions: list[str], holds_all: bool) -> None:
    """Each of this process's metric state `variables` set to its share (share_of) of the combined `values`:
    for backends whose processes each hold their own states, combined when read (torch, Horovod)."""
    for variable, value, how in zip(variables, values, reductions):
        value = np.asarray(value, dtype=np.asarray(variable.numpy()).dtype)
        variable.assign(share_of(value, how, holds_all=holds_all))


def user_metrics_declaring_nothing(metrics: list) -> list[str]:
    """'name (Class)' of each metric of a class neither Keras' nor declaring how its states combine."""
    found = []
    for metric in _leaves(metrics):
        module = type(metric).__module__.split(".")[0]
        if module in ("keras", "tf_keras", "tensorflow", "kscale") or hasattr(type(metric), _DECLARED):
            continue
        if not getattr(metric, "variables", None):
            continue
        found.append(f"{getattr(metric, 'name', '?')} ({type(metric).__name__})")
    return found


def results_from_states(
    model: Any,
    logs: dict,
    reduced_states: Callable[[list, list], list],
    average: Callable[[list[float]], list[float]],
    to_numpy: Callable[[Any], np.ndarray] = np.array,
    keep_states: bool = False,
) -> dict:
    """`logs` as one process given every worker's data reports them: every metric's state (totals, counts,
    true positives...) replaced by `reduced_states(variables, reductions)` (each combined over workers as
    its reduction, `reduction_of`, says) and the results
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
        declared = declared_reductions(model.metrics)
        reductions = [reduction_of(variable, declared) for variable in variables]
        try:
            for variable, value in zip(variables, reduced_states(variables, reductions)):
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


def reduce_by_aggregation(variables: list, rows: list[np.ndarray], reductions: list | None = None) -> list:
    """Each metric state reduced over processes as its reduction says (`reduction_of`; the variables'
    aggregations where none are given), from `rows` (each variable's values, one row per process)."""
    if reductions is None:
        reductions = [reduction_of(variable, {}) for variable in variables]
    return [reduce_rows(row, how) for row, how in zip(rows, reductions)]


def metric_objects(model: Any, keras_metric: type) -> list:
    """The metric objects the model computes: compile's (its own before the first step builds them), the
    model's, and those it holds as attributes (a train_step's own trackers)."""
    compiled = _keras_private.compile_arguments(model)
    given = flatten([compiled.get("metrics"), compiled.get("weighted_metrics")])
    held = list(vars(model).values())
    found = [m for m in [*given, *model.metrics, *held] if isinstance(m, keras_metric)]
    return list({id(m): m for m in found}.values())
