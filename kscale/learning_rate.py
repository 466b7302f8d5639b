"""The learning rate of N replicas: the user's rate (float or schedule) times a factor, with warmup.

Gradual warmup (Goyal et al. 2017) starts at the single-replica rate and reaches the scaled rate
after `warmup_steps`; Horovod's LearningRateWarmupCallback does the same for float rates only. A
schedule works for floats and schedules alike and on every backend, so kscale uses one everywhere.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

LearningRate = float | tf.keras.optimizers.schedules.LearningRateSchedule


@tf.keras.saving.register_keras_serializable(package="kscale")
class ScaledLearningRate(tf.keras.optimizers.schedules.LearningRateSchedule):
    """`base(step) × factor`, ramped linearly from `base(step)` over the first `warmup_steps` steps."""

    def __init__(self, base: LearningRate | dict, factor: float, warmup_steps: int = 0):
        super().__init__()
        if isinstance(base, dict):
            base = tf.keras.optimizers.schedules.deserialize(base)
        self.base = base
        self.factor = float(factor)
        # A variable, because the number of steps per epoch is known only when fit() starts.
        self.warmup_steps = tf.Variable(
            int(warmup_steps), trainable=False, dtype=tf.int64, name="warmup_steps"
        )

    def __call__(self, step: Any) -> tf.Tensor:
        step = tf.cast(step, tf.float32)
        if isinstance(self.base, tf.keras.optimizers.schedules.LearningRateSchedule):
            base = tf.cast(self.base(step), tf.float32)
        else:
            base = tf.constant(self.base, tf.float32)
        warmup = tf.cast(self.warmup_steps, tf.float32)
        progress = tf.where(warmup > 0, tf.minimum(step / tf.maximum(warmup, 1.0), 1.0), 1.0)
        return base * (1.0 + (self.factor - 1.0) * progress)

    def get_config(self) -> dict:
        base = self.base
        if isinstance(base, tf.keras.optimizers.schedules.LearningRateSchedule):
            base = tf.keras.optimizers.schedules.serialize(base)
        return {"base": base, "factor": self.factor, "warmup_steps": int(self.warmup_steps.numpy())}


def scaled(base: LearningRate, factor: float, warmup: bool) -> LearningRate:
    """A float stays a float when no warmup is needed, so the user's optimizer keeps its simple form."""
    if not warmup and not isinstance(base, tf.keras.optimizers.schedules.LearningRateSchedule):
        return base * factor
    return ScaledLearningRate(base, factor)


def unscaled(lr: LearningRate) -> LearningRate:
    """The user's rate inside one kscale scaled (a model saved by a kscale job, loaded again)."""
    return lr.base if isinstance(lr, ScaledLearningRate) else lr


def set_warmup_steps(lr: LearningRate, steps: int) -> bool:
    """Set the warmup length on a rate from scaled(); False if it has none."""
    if not isinstance(lr, ScaledLearningRate):
        return False
    lr.warmup_steps.assign(steps)
    return True


def describe(lr: LearningRate) -> float | str:
    if isinstance(lr, ScaledLearningRate):
        return f"{describe(lr.base)} x {lr.factor:g}"
    if isinstance(lr, tf.keras.optimizers.schedules.LearningRateSchedule):
        return type(lr).__name__
    return float(f"{float(lr):.6g}")  # float32 rates print as 0.05, not 0.05000000074505806


# The legacy .h5 format looks custom classes up by their bare class name, not the registered
# "kscale>ScaledLearningRate": register that too, so h5 checkpoints load after `import kscale.learning_rate`.
tf.keras.utils.get_custom_objects()["ScaledLearningRate"] = ScaledLearningRate
