"""Horovod's DistributedOptimizer for TF1 graph optimizers, and the one way to get averaged gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kscale import environment, log
from kscale.errors import KScaleError, OptionError
from kscale.estimator._deps import horovod

if TYPE_CHECKING:
    import tensorflow as tf

#: Gradient compression for the allreduce, by name.
COMPRESSIONS: tuple[str, ...] = ("none", "fp16")


def wrap_optimizer(
    optimizer: tf.compat.v1.train.Optimizer,
    compression: str | None = None,
    backward_passes_per_step: int = 1,
) -> tf.compat.v1.train.Optimizer:
    """`hvd.DistributedOptimizer(optimizer)` under several workers; `optimizer` itself in a single process.

    compression: "fp16" sends gradients as float16 (half the bytes on the wire), None / "none" sends them as
    they are. backward_passes_per_step: accumulate this many local batches before each allreduce (averaged,
    so k passes of batch b act like one batch of k*b); in a single process there is nothing to reduce and
    no accumulation happens.

    Only `compute_gradients` of the returned optimizer averages: use `kscale.estimator.compute_gradients`.
    """
    import tensorflow as tf

    name = "none" if compression is None else compression
    if name not in COMPRESSIONS:
        raise OptionError(
            f"unknown compression {compression!r}; "
            f"expected None or one of {', '.join(map(repr, COMPRESSIONS))}."
        )
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise OptionError(
            f"backward_passes_per_step must be an integer >= 1, got {backward_passes_per_step!r}."
        )
    if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
        raise KScaleError(
            f"wrap_optimizer takes a TF1 graph optimizer (tf.compat.v1.train.Optimizer, as tf.estimator "
            f"model_fns use), got {type(optimizer).__name__}. For Keras models use kscale.distribute()."
        )
    hvd = horovod()
    if hvd is None:
        if backward_passes_per_step > 1:
            log.warning(
                f"backward_passes_per_step={backward_passes_per_step} does nothing in a single process: "
                "each batch is applied at once."
            )
        return optimizer
    return hvd.DistributedOptimizer(
        optimizer,
        compression=hvd.Compression.fp16 if name == "fp16" else hvd.Compression.none,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=backward_passes_per_step > 1,
    )


def compute_gradients(
    optimizer: tf.compat.v1.train.Optimizer, loss: tf.Tensor, var_list: list[tf.Variable] | None = None
) -> tuple[list[Any], list[tf.Variable]]:
    """Gradients of `loss` for `var_list`, averaged over all workers: (grads, variables), in matching order.

    Horovod averages gradients inside `DistributedOptimizer.compute_gradients` and nowhere else.
    google-research/bert's optimization.py computes `tf.gradients(loss, tvars)` itself and then calls
    `optimizer.apply_gradients`, which the wrapper passes straight to the inner optimizer. Wrapped or not,
    that code applies each worker's LOCAL gradients: nothing fails, the workers' weights drift apart and the
    run is N independent trainings on 1/N of the data each. Computing the gradients through the wrapped
    optimizer is what puts the allreduce in the graph.

    Gradients of variables the loss does not reach are None, as with `tf.gradients` (BERT's unused pooler):
    `tf.clip_by_global_norm` and `apply_gradients` skip them.
    """
    if environment.current().is_distributed and not type(optimizer).__module__.startswith("horovod."):
        raise KScaleError(
            f"compute_gradients got a plain {type(optimizer).__name__} while running as one of several "
            "workers: its gradients would not be averaged. Wrap it first: "
            "optimizer = kscale.estimator.wrap_optimizer(optimizer)."
        )
    grads_and_vars = optimizer.compute_gradients(loss, var_list=var_list)
    grads = [grad for grad, _ in grads_and_vars]
    variables = [var for _, var in grads_and_vars]
    return grads, variables
