"""The learning rate of N replicas for Keras 3: kscale.learning_rate's schedule in `keras.ops`.

Keras 3 runs on JAX, TensorFlow or torch, so the schedule is written with `keras.ops` and holds no
TensorFlow variable. The warmup length is known only when fit() starts; it is a plain attribute read
when the training step is traced (the first fit of a model).

Checkpoints whose optimizer holds this schedule load after `import kscale.learning_rate`.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from kscale.learning_rate import ScaledRates

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

    def set_warmup(self, steps: int) -> None:
        self.warmup_steps = int(steps)

    def get_config(self) -> dict:
        base = self.base
        if isinstance(base, keras.optimizers.schedules.LearningRateSchedule):
            base = keras.optimizers.schedules.serialize(base)
        return {"base": base, "factor": self.factor, "warmup_steps": self.warmup_steps}


RATES = ScaledRates(ScaledLearningRate, keras.optimizers.schedules.LearningRateSchedule)
