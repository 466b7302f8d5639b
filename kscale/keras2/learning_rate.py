"""tf.keras' optimizers applying the rate a script writes times the plan's factor (kscale.learning_rate).

An update of a tf.keras optimizer (2.11+) goes through `apply_gradients` (`minimize` calls it) and reads
its rate through the `learning_rate` property (`update_step`, weight decay), in the replica's thread or,
under a tf.distribute strategy, in the merge that the replicas wait in: the subclass multiplies the rate
while an update is in progress. A legacy optimizer (`tf.keras.optimizers.legacy`) reads it for an update
in `_decayed_lr` only, which the subclass multiplies. Reading `optimizer.learning_rate` (or `.lr`)
elsewhere gives the rate as written, the variable itself, so `backend.set_value(optimizer.lr, x)` writes it.

The warmup length is a variable the traced step reads: it is known only when fit() starts.
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from kscale import _keras_private
from kscale.learning_rate import Applying, RateScaling, applying, attach, scaling_of
from kscale.subclassing import same_named_subclass

SCHEDULE = tf.keras.optimizers.schedules.LearningRateSchedule


def _multiplier(optimizer: Any, scaling: RateScaling) -> Any:
    if scaling.warmup_holder is None:
        return scaling.factor
    warmup = tf.cast(scaling.warmup_holder, tf.float32)
    step = tf.cast(optimizer.iterations, tf.float32)
    progress = tf.where(warmup > 0, tf.minimum(step / tf.maximum(warmup, 1.0), 1.0), 1.0)
    return 1.0 + (scaling.factor - 1.0) * progress


def _times(rate: Any, multiplier: Any) -> Any:
    if isinstance(multiplier, float) and multiplier == 1.0:
        return rate
    return rate * tf.cast(multiplier, rate.dtype)


@functools.cache
def _scaled_class(base: type) -> type:
    """`base` applying its rate × the optimizer's RateScaling in every update. Named and placed like the
    original, so that saved files name the user's optimizer class."""
    namespace: dict[str, Any] = {"_kscale_scaled_rate": True}
    if _keras_private.is_legacy_optimizer_class(base):

        def decayed_rate(self: Any, var_dtype: Any) -> Any:
            rate = _keras_private.legacy_decayed_rate(base, self, var_dtype)
            scaling = scaling_of(self)
            return rate if scaling is None else _times(rate, _multiplier(self, scaling))

        namespace[_keras_private.LEGACY_DECAYED_RATE] = decayed_rate
    else:
        written = base.learning_rate  # the property

        def apply_gradients(self: Any, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
            with Applying(self):
                return base.apply_gradients(self, grads_and_vars, *args, **kwargs)

        def get_rate(self: Any) -> Any:
            rate = written.fget(self)
            scaling = scaling_of(self)
            if scaling is None or not applying(self):
                return rate
            return _times(tf.convert_to_tensor(rate), _multiplier(self, scaling))

        namespace["apply_gradients"] = apply_gradients
        namespace["learning_rate"] = property(get_rate, written.fset, doc=written.__doc__)
    return same_named_subclass(base, namespace)


def _updating(optimizer: Any) -> Any:
    """The optimizer that holds the rate and updates the weights: a LossScaleOptimizer's inner one."""
    if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
        return optimizer.inner_optimizer
    return optimizer


def with_scaled_class(optimizer: Any) -> Any:
    """`optimizer` (its inner one under loss scaling) as an instance of a class that applies its rate
    scaled. Done before anything else wraps it: Horovod's DistributedOptimizer subclasses the class it is
    given and calls `super(self.__class__, self)`, which a subclass of it would send round in a loop."""
    target = _updating(optimizer)
    if not getattr(type(target), "_kscale_scaled_rate", False):
        target.__class__ = _scaled_class(type(target))
    return optimizer


def attach_scaling(optimizer: Any, scaling: RateScaling) -> None:
    """Apply `optimizer`'s rate with `scaling` from its next update on."""
    attach(_updating(with_scaled_class(optimizer)), scaling)


def rate_scaling(factor: float, warmup: bool) -> RateScaling:
    """A RateScaling; with `warmup`, its length a variable the traced step reads (set when fit starts)."""
    if not warmup:
        return RateScaling(factor)
    holder = tf.Variable(0, trainable=False, dtype=tf.int64, name="kscale_warmup_steps")
    return RateScaling(factor, warmup_holder=holder)
