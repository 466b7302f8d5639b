"""The learning rate of N replicas for Keras 3 models: kscale.learning_rate's rule, in `keras.ops`.

Keras 3 runs on JAX, TensorFlow or torch, so the schedule is written with `keras.ops` and holds no
TensorFlow variable. The warmup length is known only when fit() starts; it is a plain attribute read
when the training step is traced (the first fit of a model).

Checkpoints whose optimizer holds this schedule load after `import kscale.learning_rate_keras3`.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

LearningRate = float | keras.optimizers.schedules.LearningRateSchedule


@keras.saving.register_keras_serializable(package="kscale")
class ScaledLearningRate(keras.optimizers.schedules.LearningRateSchedule):
    """`base(step) × factor`, ramped linearly from `base(step)` over the first `warmup_steps` steps."""

    def __init__(self, base: LearningRate | dict, factor: float, warmup_steps: int = 0):
        super().__init__()
        if isinstance(base, dict):
            base = keras.optimizers.schedules.deserialize(base)
        self.base = base
        self.factor = float(factor)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step: Any) -> Any:
        step = ops.cast(step, "float32")
        if isinstance(self.base, keras.optimizers.schedules.LearningRateSchedule):
            base = ops.cast(self.base(step), "float32")
        else:
            base = ops.cast(self.base, "float32")
        if self.warmup_steps <= 0:
            return base * self.factor
        progress = ops.minimum(step / float(self.warmup_steps), 1.0)
        return base * (1.0 + (self.factor - 1.0) * progress)

    def get_config(self) -> dict:
        base = self.base
        if isinstance(base, keras.optimizers.schedules.LearningRateSchedule):
            base = keras.optimizers.schedules.serialize(base)
        return {"base": base, "factor": self.factor, "warmup_steps": self.warmup_steps}


def scaled(base: LearningRate, factor: float, warmup: bool) -> LearningRate:
    """A float stays a float when no warmup is needed, so the user's optimizer keeps its simple form."""
    if not warmup and not isinstance(base, keras.optimizers.schedules.LearningRateSchedule):
        return base * factor
    return ScaledLearningRate(base, factor)


def unscaled(lr: LearningRate) -> LearningRate:
    """The user's rate inside one kscale scaled (a model saved by a kscale job, loaded again)."""
    return lr.base if isinstance(lr, ScaledLearningRate) else lr


def set_warmup_steps(lr: LearningRate, steps: int) -> bool:
    """Set the warmup length on a rate from scaled(); False if it has none."""
    if not isinstance(lr, ScaledLearningRate):
        return False
    lr.warmup_steps = steps
    return True


def describe(lr: LearningRate) -> float | str:
    if isinstance(lr, ScaledLearningRate):
        return f"{describe(lr.base)} x {lr.factor:g}"
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
        return type(lr).__name__
    return float(f"{float(lr):.6g}")
