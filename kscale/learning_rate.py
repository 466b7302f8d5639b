"""The learning rate of N replicas: the rate a script writes is one worker's; every update applies it
times the plan's factor.

One rule for every way a rate reaches the optimizer: `compile`, a callback (`LearningRateScheduler`,
`ReduceLROnPlateau`), `optimizer.learning_rate = x`, `keras.backend.set_value(optimizer.lr, x)`, a
`LearningRateSchedule` object. The optimizer keeps the rate as written, so reading it gives back what
was written (a relative schedule, `lr * 0.5`, compounds nothing), History logs it, and every file saved
holds it: a job of another size that loads the file applies its own factor. Each update applies
`rate × factor` (linear: N, sqrt: √N), ramped from 1 over the warmup steps (Goyal et al. 2017), where the
optimizer reads its rate for an update.

Each family makes that so by giving the optimizer a subclass of its own class, once (the pattern of
`torch.nn.utils.parametrize`): kscale/keras2/learning_rate.py (tf.keras, its legacy optimizers too) and
kscale/keras3/learning_rate.py (Keras 3 on every backend). Both read the `RateScaling` the optimizer
holds.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

#: The attribute of an optimizer holding its RateScaling (set with object.__setattr__: never tracked).
SCALING = "_kscale_rate_scaling"
#: The attribute counting the updates in progress on an optimizer (replica threads may apply at once).
APPLYING = "_kscale_applying"
_lock = threading.Lock()


@dataclasses.dataclass
class RateScaling:
    """The factor the written rate is applied with, and the warmup that ramps it from 1."""

    factor: float
    #: Steps over which the factor ramps up from 1 (0: none); set when fit starts (`set_warmup`).
    warmup_steps: int = 0
    #: Where a family's traced steps read the warmup length (tf.keras: a tf.Variable), or None.
    warmup_holder: Any = None

    def set_warmup(self, steps: int) -> None:
        self.warmup_steps = int(steps)
        if self.warmup_holder is not None:
            self.warmup_holder.assign(self.warmup_steps)

    def describe(self, rate: Any, schedule_type: type) -> float | str:
        """The rate an update applies, for the plan: a number for a float rate, else the schedule's name."""
        if isinstance(rate, schedule_type):
            return type(rate).__name__ if self.factor == 1.0 else f"{type(rate).__name__} x {self.factor:g}"
        return float(f"{float(rate) * self.factor:.6g}")  # 0.05, not 0.05000000074505806


def scaling_of(optimizer: Any) -> RateScaling | None:
    """The RateScaling an optimizer applies its rate with, or None."""
    return vars(optimizer).get(SCALING) if hasattr(optimizer, "__dict__") else None


def attach(optimizer: Any, scaling: RateScaling) -> None:
    object.__setattr__(optimizer, SCALING, scaling)


def applying(optimizer: Any) -> bool:
    """Whether `optimizer` is inside an update now (the rate it reads then is the one applied)."""
    return bool(vars(optimizer).get(APPLYING, 0))


class Applying:
    """`with Applying(optimizer):` around an update: reading the rate inside it gives the applied rate."""

    def __init__(self, optimizer: Any):
        self.optimizer = optimizer

    def __enter__(self) -> None:
        with _lock:
            object.__setattr__(self.optimizer, APPLYING, vars(self.optimizer).get(APPLYING, 0) + 1)

    def __exit__(self, *exc: Any) -> None:
        with _lock:
            object.__setattr__(self.optimizer, APPLYING, vars(self.optimizer)[APPLYING] - 1)


def describe(rate: Any, schedule_type: type) -> float | str:
    """A rate as written, for the plan."""
    if isinstance(rate, schedule_type):
        return type(rate).__name__
    return float(f"{float(rate):.6g}")
