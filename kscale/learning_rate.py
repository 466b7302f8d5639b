"""The learning rate of N replicas, for both Keras families: the user's rate (float or schedule) times a
factor, with warmup.

Gradual warmup (Goyal et al. 2017) starts at the single-replica rate and reaches the scaled rate after
`warmup_steps`; Horovod's LearningRateWarmupCallback does the same for float rates only. A schedule works
for floats and schedules alike and on every backend, so kscale uses one everywhere. Each family writes the
schedule in its own Keras (kscale/keras2/learning_rate.py: TensorFlow ops and a variable;
kscale/keras3/learning_rate.py: keras.ops); the rules around it are here, once.

Checkpoints whose optimizer holds kscale's schedule load after `import kscale.learning_rate`: it registers
the schedule of the Keras this process uses with Keras.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any


@dataclasses.dataclass(frozen=True)
class ScaledRates:
    """A family's scaled schedule class and its Keras' schedule base class, and what kscale does with them."""

    #: The family's ScaledLearningRate: built from (base, factor), with set_warmup(steps).
    scaled_type: type
    #: Keras' LearningRateSchedule of the family.
    schedule_type: type

    def scaled(self, base: Any, factor: float, warmup: bool) -> Any:
        """A float stays a float when no warmup is needed, so the user's optimizer keeps its simple form."""
        if not warmup and not isinstance(base, self.schedule_type):
            return base * factor
        return self.scaled_type(base, factor)

    def unscaled(self, lr: Any) -> Any:
        """The user's rate inside one kscale scaled (a model saved by a kscale job, loaded again)."""
        return lr.base if isinstance(lr, self.scaled_type) else lr

    def set_warmup_steps(self, lr: Any, steps: int) -> bool:
        """Set the warmup length on a rate from scaled(); False if it has none."""
        if not isinstance(lr, self.scaled_type):
            return False
        lr.set_warmup(steps)
        return True

    def describe(self, lr: Any) -> float | str:
        """A short form for the printed plan."""
        if isinstance(lr, self.scaled_type):
            return f"{self.describe(lr.base)} x {lr.factor:g}"
        if isinstance(lr, self.schedule_type):
            return type(lr).__name__
        return float(f"{float(lr):.6g}")  # float32 rates print as 0.05, not 0.05000000074505806


def _register_for_process() -> None:
    """Import the family module of the Keras this process uses, which registers its schedule with Keras.
    (By name: when a family module imports this one, it is itself still being imported.)"""
    from kscale import frameworks

    generation = frameworks.process_keras().generation
    importlib.import_module(f"kscale.keras{generation}.learning_rate")


_register_for_process()
