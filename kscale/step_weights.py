"""A replica's share of a step whose slices differ in size: what makes the last step of array data exact.

One process at the global batch B trains its last step on the m < B samples left: its loss is their
mean. Cut in R slices of m_r samples (as even as they go, every sample used), each replica's loss is its
slice's mean, and the replicas' gradients averaged as they are (1/R each) would weigh a sample of a short
slice more than one of a long one. Weighted by their sizes, R·m_r/m each, their mean is one process's:
Σ_r (m_r/m) ∇mean_r = ∇ Σ l / m. Each replica still computes its loss and metrics on its own samples
only, so History and the metrics' states stay one process's too (no padding is counted).

The weight travels with the data (`Weighted`, around the batch kscale feeds), so no collective is needed
to learn it: the step takes it off the batch (`take_off`) before Keras or the user's train_step sees the
batch, and the backend's gradient averaging multiplies by it (`scale`). A step without one (full steps,
every other kind of data, train_on_batch) keeps its gradients as they are.

Exact for losses that are a mean over the batch: Keras' default reduction ('sum_over_batch_size'), every
built-in loss, and a train_step's own loss where it averages its batch (tf.reduce_mean, a Loss object),
which is what the replicas' mean of gradients already assumes on full steps.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from kscale.model_steps import Layer
from kscale.subclassing import same_named_subclass


class Weighted(NamedTuple):
    """A batch and its replica's gradient weight (a scalar), as kscale's feed yields the batches of a step
    whose slices differ in size."""

    batch: Any
    weight: Any


class WholeStep(NamedTuple):
    """The whole last step of arrays, the same on every process, as kscale's feed yields it where every
    process's batches must have the same rows (Keras 3 on JAX): laid out on every device
    (kscale.backends.jax), each computing one process's step; its weight (ones) is not used."""

    batch: Any
    weight: Any


_local = threading.local()  # per thread: a tf.distribute strategy traces each replica in its own


def batch_of(data: Any) -> Any:
    """The batch of `data`, without its weight where it has one."""
    return data.batch if isinstance(data, Weighted | WholeStep) else data


def take_off(data: Any) -> Any:
    """The batch without its weight, the weight kept for `scale` (none where the batch has none)."""
    _local.in_loss = False
    if isinstance(data, Weighted):
        _local.weight = data.weight
        return data.batch
    _local.weight = None
    return data.batch if isinstance(data, WholeStep) else data


def current() -> Any:
    """This replica's weight in the step being run (a number or a scalar tensor), or None."""
    weight = getattr(_local, "weight", None)
    if weight is not None and getattr(weight, "ndim", 0):  # one row per sample (Keras 3's own feeds)
        weight = weight[0]
    return weight


def in_loss() -> Any:
    """This replica's weight, for a loss scaled by it before its backward pass (a mixed-precision loss
    scale, whose float16 backward pass then carries one process's numbers on a short step too: a replica
    of fewer samples would carry larger ones, and overflow where one process does not, or the reverse);
    its gradients are then not weighed again (`scale`). None where the step has none."""
    weight = current()
    if weight is not None:
        _local.in_loss = True
    return weight


def scale(gradients: list) -> list:
    """The step's gradients times its replica's weight (as they are where the step has none, or where
    the loss carried it: `in_loss`)."""
    weight = current()
    if weight is None or getattr(_local, "in_loss", False):
        return gradients
    return [None if g is None else times(g, like(weight, g)) for g in gradients]


def weighed_sum(all_sum: Any = None) -> Any:
    """`all_sum` (a differentiable sum of a tensor over the replicas, TensorFlow's; by default the
    tf.distribute replica context's, as tf.keras and Keras 3 sum a synchronized BatchNormalization's
    statistics), whose gradient weighs what each replica sends back by that replica's weight in the step.

    A synchronized BatchNormalization sums its statistics over the replicas, and their backward pass sums
    every replica's gradient into every other's: replica r's gradient then holds parts of the others'
    losses, and `scale` would multiply all of them by r's weight. Here each replica's part is sent back
    times its own weight and received divided by the receiver's, so that after `scale` each is weighed by
    its own replica's weight, as one process weighs the samples of a step shared unevenly."""
    import tensorflow as tf

    all_sum = all_sum or _replica_sum

    def summed(local: Any) -> Any:
        weight = current()
        if weight is None:
            return all_sum(local)

        @tf.custom_gradient
        def weighed(x: Any) -> Any:
            def backward(upstream: Any) -> Any:
                share = tf.cast(weight, upstream.dtype)
                return all_sum(upstream * share) / share

            return all_sum(x), backward

        return weighed(local)

    return summed


def _replica_sum(tensor: Any) -> Any:
    """The sum of `tensor` over the tf.distribute strategy's replicas (its replica context's all_reduce,
    whose gradient is summed the same way); `tensor` itself outside a replica context (one batch)."""
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None:
        return tensor
    return context.all_reduce(tf.distribute.ReduceOp.SUM, tensor)


def times(gradient: Any, factor: Any) -> Any:
    """`gradient × factor`; a sparse gradient (TensorFlow's IndexedSlices of an Embedding) stays sparse:
    its values are multiplied, where `*` would make it a dense tensor, which some optimizers then update
    in every row (Keras 3's Adam decays only the rows of a sparse one)."""
    if hasattr(gradient, "indices") and hasattr(gradient, "values") and hasattr(gradient, "dense_shape"):
        return type(gradient)(gradient.values * factor, gradient.indices, gradient.dense_shape)
    return gradient * factor


def like(weight: Any, gradient: Any) -> Any:
    """The weight in the gradient's dtype, in its framework (a tensor of the step, or a number)."""
    if isinstance(weight, int | float):
        return weight
    cast = getattr(gradient, "dtype", None)
    if hasattr(weight, "to") and cast is not None:  # torch
        return weight.to(dtype=cast, device=gradient.device)
    if hasattr(weight, "astype") and cast is not None:  # numpy, JAX
        return weight.astype(cast)
    import tensorflow as tf

    return tf.cast(weight, gradient.dtype)


def _with_share(args: tuple, kwargs: dict) -> dict:
    """A Mean's update_state arguments, given this replica's share of the step as the sample weight of a
    number for the whole step (a tensor of no dimension) that comes without one."""
    weight = current()
    one_number = len(args) == 1 and len(getattr(args[0], "shape", (1,))) == 0
    if one_number and weight is not None and kwargs.get("sample_weight") is None:
        kwargs = {**kwargs, "sample_weight": like(weight, args[0])}
    return kwargs


def _weighed_update(update_state: Callable[..., Any]) -> Callable[..., Any]:
    """tf.keras: `update_state` as bound on a metric instance, its arguments `_with_share`."""

    def weighed(*args: Any, **kwargs: Any) -> Any:
        return update_state(*args, **_with_share(args, kwargs))

    weighed._kscale_weighed = True
    return weighed


@functools.cache
def _weighted_mean_class(base: type) -> type:
    """Keras 3: `base` (a Mean class) whose update_state takes its arguments `_with_share`."""

    def update_state(self: Any, *args: Any, **kwargs: Any) -> Any:
        return base.update_state(self, *args, **_with_share(args, kwargs))

    namespace = {"update_state": update_state, "_kscale_weighed": True}
    return same_named_subclass(base, namespace)


def weigh_one_number_means(metrics: list, mean_class: type) -> None:
    """Make each `mean_class` metric (keras.metrics.Mean) of `metrics` weigh a number it is given for the
    whole step (a tensor of no dimension: keras.io's `metric.update_state(loss)` in a train_step of one's
    own) by this replica's share of a step shared unevenly. One process adds the step's mean loss once;
    replicas of 2 and 1 samples each added their own once, the 1-sample mean counting as much as the
    other (History's loss 1% off on 67 samples, generated torch seeds 96 and 498). Weighted by the share
    w_r = R·m_r/m, the replicas' states sum to R times one process's total and count: the same mean.
    Full steps are unchanged (every share is 1). Keras 3: the metric's class becomes a subclass of it;
    tf.keras binds `update_state` on each metric instance as it is made (its update_state_wrapper), so
    there the instance's is wrapped."""
    for metric in metrics:  # Mean itself, and classes of it that take values as Mean does
        if not isinstance(metric, mean_class):
            continue
        own = vars(metric).get("update_state")  # tf.keras: bound on the instance
        if own is None and not getattr(type(metric), "_kscale_weighed", False):
            metric.__class__ = _weighted_mean_class(type(metric))
        elif own is not None and not getattr(own, "_kscale_weighed", False):
            object.__setattr__(metric, "update_state", _weighed_update(own))


def around(replicas: int) -> Layer:
    """kscale.model_steps' outermost layer: the train step takes the weight off each batch first (the
    batch is its last argument: JAX's steps take the state before it), and both steps run as one
    replica's of `replicas` (kscale.loss_reduction)."""
    from kscale.loss_reduction import replica_step

    def layer(step: Callable[..., Any], test: Callable[..., Any]) -> tuple[Callable, Callable]:
        def train_step(*args: Any) -> Any:
            try:
                with replica_step(replicas):
                    return step(*args[:-1], take_off(args[-1]))
            finally:
                _local.weight = None  # no stale weight for an update outside the step

        def test_step(*args: Any) -> Any:
            with replica_step(replicas):
                return test(*args[:-1], batch_of(args[-1]))

        return train_step, test_step

    return layer
