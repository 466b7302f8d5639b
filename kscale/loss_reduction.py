"""A loss's reduction, honoured as one process at the global batch honours it.

Each replica computes its loss as one process would on its slice of the global batch, and the backend
averages the replicas' gradients, each weighted by its slice's share (kscale.step_weights). A mean over the
batch (Keras' default `sum_over_batch_size`, `mean`; tf.keras' AUTO and SUM_OVER_BATCH_SIZE) is then one
process's. A sum (`"sum"`, `Reduction.SUM`), which one process takes over the whole global batch, is the
replicas' sums added: inside a step kscale runs, each replica's sum is multiplied by R / w (R replicas, w
its slice's gradient weight, 1 in full steps), so that the weighted mean the backend takes is their sum,
and History's loss (each batch's value weighed by its rows, the states summed over replicas) is one
process's too. Evaluation's batches are each worker's own, not slices of one process's global batches: a
sum of a batch then depends on how the data is cut (the plan says so).

Refused, with a ModelError saying what to use: a compiled loss reduced with `"none"` (a vector, whose
gradient every backend takes differently), Keras 3's `"mean_with_sample_weight"` with sample weights
(its divisor is the global batch's weight, which no replica has), and a loss function that returns one
number per batch given sample weights (Keras weighs it by the batch's mean weight: a product of means).

Keras 3 on JAX computes every step's loss on the global batch itself: R is 1 there, and nothing changes.
The hook into Keras' reduction is kscale._keras_private.on_loss_reduction.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from kscale import step_weights
from kscale.errors import ModelError

_local = threading.local()  # per thread: a tf.distribute strategy traces each replica in its own


@contextlib.contextmanager
def replica_step(replicas: int) -> Iterator[None]:
    """A training or evaluation step of one of `replicas` replicas, each on its slice of the global batch."""
    before = getattr(_local, "replicas", 1)
    _local.replicas = replicas
    try:
        yield
    finally:
        _local.replicas = before


def replicas() -> int:
    """The replicas of the step being traced in this thread, each on its slice (1 outside a step)."""
    return getattr(_local, "replicas", 1)


def scaled_sum(loss: Any) -> Any:
    """A replica's sum over its slice, as its share of one process's sum over the global batch."""
    count = replicas()
    if count <= 1:
        return loss
    weight = step_weights.current()
    if weight is None:
        return loss * float(count)
    return loss * (float(count) / step_weights.like(weight, loss))


def check(reduction: Any, has_sample_weight: bool, per_sample: bool = True) -> None:
    """Inside a step of several replicas: refuse the reductions no replica can compute its share of.
    `per_sample`: the loss gave one value per sample (False: one number for the batch)."""
    if replicas() <= 1:
        return
    if not per_sample and has_sample_weight:
        raise ModelError(
            "a loss function returns one number for the batch (it reduces over the batch itself, as "
            "`tf.reduce_mean(...)` or `ops.mean(...)` of the errors does), and fit was given sample weights "
            "(or class_weight): Keras then multiplies that batch mean by the batch's mean weight, a product "
            "of two means that replicas holding other slices of the global batch cannot add up to. Return "
            "one loss per sample instead (reduce over the last axis only, as Keras' own losses do), and Keras "
            "weighs and averages them."
        )
    if reduction == "mean_with_sample_weight" and has_sample_weight:
        raise ModelError(
            "a loss with reduction='mean_with_sample_weight' divides by the sum of the sample weights of the "
            "global batch, which no replica knows (each has its own slice). Use reduction="
            "'sum_over_batch_size' (Keras' default) or 'sum', or train without sample weights."
        )


def check_compiled(losses: list, none_reductions: tuple) -> None:
    """compile()'s loss objects: one reduced with 'none' gives a vector, whose gradient each backend
    takes its own way (a sum, or an error): refused where replicas compute their own losses."""
    for loss in losses:
        if getattr(loss, "reduction", "") in none_reductions:
            raise ModelError(
                f"the compiled loss {getattr(loss, 'name', type(loss).__name__)!r} has reduction=None, so "
                "it is a vector, not one number per batch. Compile it with reduction='sum_over_batch_size' "
                "(Keras' default) or 'sum' (tf.keras: Reduction.SUM_OVER_BATCH_SIZE or Reduction.SUM)."
            )
