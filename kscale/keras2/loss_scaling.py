"""A mixed-precision loss scale applied as one process applies it, replica by replica.

Under `mixed_float16` a LossScaleOptimizer multiplies the loss by its scale S before the backward pass, so
that float16 gradients neither underflow nor overflow, and skips a step (halving S) whose gradients are not
finite. Each kscale replica's loss is one process's loss on its slice, a mean over b = B/R samples, and the
replicas' gradients are averaged after the backward pass (kscale.backends._replica_mean, Horovod's
average): every float16 gradient of the backward pass is then R times one process's at the global batch B.
A step overflowed under R replicas that did not in one process (generated program 16: the scale halved at
step 3, not at 11; 0.024 off in the weights, exact in float32). Here each replica's loss is scaled by S/R
and its gradients unscaled by R/S: the backward pass carries one process's numbers, and the averaged
gradient is the same as before (R a power of two: bit for bit). On a short last step, whose slices differ
in size (kscale.step_weights), the loss is scaled by S times the replica's share m_r/m instead, and its
gradients are not weighed again: a slice of fewer samples carries one process's numbers too (generated
seed 446 of C-tf: a replica of one sample of a three-sample step skipped no step where one process did,
0.09 off).
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from kscale import loss_reduction, step_weights
from kscale.subclassing import same_named_subclass


@functools.cache
def _one_process_class(base: type) -> type:
    def get_scaled_loss(self: Any, loss: Any) -> Any:
        scaled, share = base.get_scaled_loss(self, loss), 1.0 / loss_reduction.replicas()
        if share == 1.0:
            return scaled
        weight = step_weights.in_loss()  # a short step's share: its gradients then carry it already

        def times_share(value: Any) -> Any:
            return value * (share if weight is None else tf.cast(weight, value.dtype) * share)

        if callable(scaled):
            return lambda: times_share(scaled())
        return times_share(scaled)

    def get_unscaled_gradients(self: Any, grads: Any) -> Any:
        unscaled, replicas = base.get_unscaled_gradients(self, grads), float(loss_reduction.replicas())
        if replicas == 1.0:
            return unscaled
        return [None if g is None else step_weights.times(g, replicas) for g in unscaled]

    namespace = {"get_scaled_loss": get_scaled_loss, "get_unscaled_gradients": get_unscaled_gradients}
    return same_named_subclass(base, namespace)


def as_one_process(optimizer: Any) -> Any:
    """`optimizer`, a LossScaleOptimizer, scaling each replica's loss as one process scales its loss."""
    if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
        optimizer.__class__ = _one_process_class(type(optimizer))
    return optimizer
