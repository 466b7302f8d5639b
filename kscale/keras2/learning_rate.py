"""The learning rate of N replicas for tf.keras: kscale.learning_rate's schedule in TensorFlow ops.

The warmup length is known only when fit() starts, after the training step may have been traced, so it
is a TensorFlow variable the traced step reads.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from kscale.learning_rate import ScaledRates

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

    def set_warmup(self, steps: int) -> None:
        self.warmup_steps.assign(steps)

    def get_config(self) -> dict:
        base = self.base
        if isinstance(base, tf.keras.optimizers.schedules.LearningRateSchedule):
            base = tf.keras.optimizers.schedules.serialize(base)
        return {"base": base, "factor": self.factor, "warmup_steps": int(self.warmup_steps.numpy())}


RATES = ScaledRates(ScaledLearningRate, tf.keras.optimizers.schedules.LearningRateSchedule)

# The legacy .h5 format looks custom classes up by their bare class name, not the registered
# "kscale>ScaledLearningRate": register that too, so h5 checkpoints load after `import kscale.learning_rate`.
tf.keras.utils.get_custom_objects()["ScaledLearningRate"] = ScaledLearningRate
