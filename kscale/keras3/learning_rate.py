"""Keras 3's optimizers applying the rate a script writes times the plan's factor (kscale.learning_rate).

Every update of a Keras 3 optimizer goes through `apply` (`apply_gradients`, `minimize`, a train_step of
one's own, JAX's `stateless_apply`), and reads its rate there through `_get_current_learning_rate`: the
`learning_rate` property, the rate handed to `update_step`, and weight decay (torch's too) all read it.
The subclass multiplies the rate while an update is in progress, and nowhere else, so a callback reading
`optimizer.learning_rate` gets the rate as written.
"""

from __future__ import annotations

import functools
from typing import Any

import keras
from keras import ops

from kscale import _keras_private
from kscale.learning_rate import Applying, RateScaling, applying, attach, scaling_of
from kscale.subclassing import same_named_subclass

SCHEDULE = keras.optimizers.schedules.LearningRateSchedule


def _multiplier(optimizer: Any, scaling: RateScaling) -> Any:
    if scaling.warmup_steps <= 0:
        return scaling.factor
    progress = ops.minimum(ops.cast(optimizer.iterations, "float32") / float(scaling.warmup_steps), 1.0)
    return 1.0 + (scaling.factor - 1.0) * progress


@functools.cache
def _scaled_class(base: type) -> type:
    """`base` applying its rate × the optimizer's RateScaling in every update. Named and placed like the
    original, so that saved files name the user's optimizer class."""

    def apply(self: Any, grads: Any, trainable_variables: Any = None) -> Any:
        with Applying(self):
            return base.apply(self, grads, trainable_variables)

    def current_rate(self: Any) -> Any:
        rate = _keras_private.current_learning_rate(base, self)
        scaling = scaling_of(self)
        if scaling is None or not applying(self):
            return rate
        multiplier = _multiplier(self, scaling)
        if isinstance(multiplier, float) and multiplier == 1.0:
            return rate
        return ops.multiply(rate, ops.cast(multiplier, getattr(rate, "dtype", "float32")))

    namespace = {"apply": apply, "_kscale_scaled_rate": True}
    namespace[_keras_private.CURRENT_LEARNING_RATE] = current_rate
    return same_named_subclass(base, namespace)


def _updating(optimizer: Any) -> Any:
    """The optimizer that holds the rate and updates the weights: a LossScaleOptimizer's inner one."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.inner_optimizer
    return optimizer


def with_scaled_class(optimizer: Any) -> Any:
    """`optimizer` (its inner one under loss scaling) as an instance of a class that applies its rate
    scaled; done before anything else wraps it, once."""
    target = _updating(optimizer)
    if not getattr(type(target), "_kscale_scaled_rate", False):
        target.__class__ = _scaled_class(type(target))
    return optimizer


def attach_scaling(optimizer: Any, scaling: RateScaling) -> None:
    """Apply `optimizer`'s rate with `scaling` from its next update on."""
    attach(_updating(with_scaled_class(optimizer)), scaling)


def rate_scaling(factor: float, warmup: bool) -> RateScaling:
    """A RateScaling; its warmup length is read when the step is traced (fit's first step)."""
    return RateScaling(factor)
