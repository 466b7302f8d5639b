"""A mixed-precision loss scale applied as one process applies it, replica by replica (Keras 3).

The same as tf.keras' (kscale/keras2/loss_scaling.py, which says why): each replica's loss is scaled by S/R
in `scale_loss`, and the gradients `apply` takes are multiplied by R before the LossScaleOptimizer checks
them and divides them by S; the float16 backward pass carries one process's numbers and the averaged
gradient is unchanged; on a short last step, by S times the replica's share instead (step_weights.in_loss).
On JAX every step computes the global batch (R is 1): nothing changes there.
"""

from __future__ import annotations

import functools
from typing import Any

import keras

from kscale import loss_reduction, step_weights
from kscale.subclassing import same_named_subclass


@functools.cache
def _one_process_class(base: type) -> type:
    def scale_loss(self: Any, loss: Any) -> Any:
        scaled, replicas = base.scale_loss(self, loss), loss_reduction.replicas()
        if replicas == 1:
            return scaled
        weight = step_weights.in_loss()  # a short step's share: its gradients then carry it already
        if weight is None:
            return keras.ops.multiply(scaled, 1.0 / replicas)
        return keras.ops.multiply(scaled, keras.ops.cast(weight, scaled.dtype) / replicas)

    def apply(self: Any, grads: Any, trainable_variables: Any = None) -> Any:
        replicas = float(loss_reduction.replicas())
        if replicas != 1.0:
            grads = [None if g is None else step_weights.times(g, replicas) for g in grads]
        return base.apply(self, grads, trainable_variables)

    namespace = {"scale_loss": scale_loss, "apply": apply, "_kscale_one_process_scale": True}
    return same_named_subclass(base, namespace)


def as_one_process(optimizer: Any) -> Any:
    """`optimizer`, a LossScaleOptimizer, scaling each replica's loss as one process scales its loss; once
    (a second time would scale by S/R² and multiply the gradients by R²: torch's own call and the copy that
    gradient accumulation makes both apply it)."""
    scales = getattr(type(optimizer), "_kscale_one_process_scale", False)
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) and not scales:
        optimizer.__class__ = _one_process_class(type(optimizer))
    return optimizer
