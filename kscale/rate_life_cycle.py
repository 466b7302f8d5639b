"""The learning rate of a distributed model from `compile` to the end of `fit`, in one place: the factor
for the world's size (made on first use; changed when elastic Horovod changes the world), the warmup that
ramps it, and what the plan says of each optimizer's rate. How an optimizer applies it is
kscale/learning_rate.py's; which optimizers get it is distributed_model's."""

from __future__ import annotations

from typing import Any

from kscale.errors import DataError
from kscale.learning_rate import RateScaling, describe
from kscale.options import Options
from kscale.plan import lr_scale_factor


class RateLifeCycle:
    """The one RateScaling every optimizer of a distributed model applies its rate with."""

    def __init__(self, backend: Any, options: Options) -> None:
        self.backend, self.options = backend, options
        self._rates = backend.family.rates
        #: made on first use (the first compile): None until then, and nothing to scale
        self.scaling: RateScaling | None = None
        self.warmup = False

    def attach(self, optimizer: Any) -> None:
        """`optimizer` applies the rate the script writes (now or later) times the plan's factor."""
        if self.scaling is None:
            factor = lr_scale_factor(self.options.lr_scaling, self.backend.num_replicas)
            self.warmup = self.options.warmup_epochs > 0 and factor != 1.0
            self.scaling = self._rates.rate_scaling(factor, self.warmup)
        self._rates.attach_scaling(optimizer, self.scaling)

    def written(self, rate: Any) -> float | str:
        """The rate as the script writes it, for the plan."""
        return describe(rate, self._rates.SCHEDULE)

    def applied(self, rate: Any) -> float | str:
        """The rate an update applies, for the plan."""
        if self.scaling is None:
            return self.written(rate)
        return self.scaling.describe(rate, self._rates.SCHEDULE)

    def of(self, optimizer: Any) -> Any:
        """The rate `optimizer` holds, as written."""
        return self.backend.family.learning_rate_of(optimizer)

    def plan_fields(self, rate: Any) -> dict[str, Any]:
        """The plan's rate before and after, and its warmup, for the model's optimizer's `rate`."""
        return {
            "learning_rate_before": self.written(rate),
            "learning_rate_after": self.applied(rate),
            "warmup_epochs": float(self.options.warmup_epochs) if self.warmup else 0.0,
        }

    def for_this_world(self, model: Any) -> None:
        """The factor for the world's size now; a traced step holds the one it was traced with (a
        constant, as the rate's other inputs), so it is traced again."""
        if self.scaling is None:
            return
        self.scaling.factor = lr_scale_factor(self.options.lr_scaling, self.backend.num_replicas)
        if getattr(model, "train_function", None) is not None:
            model.make_train_function(force=True)

    def start_warmup(self, steps_per_epoch: int | None) -> None:
        """The warmup's steps, once fit knows an epoch's."""
        if not self.warmup:
            return
        if steps_per_epoch is None:
            raise DataError(
                "warmup_epochs needs to know the steps per epoch: pass steps_per_epoch to fit, or give data "
                "of known length."
            )
        self.scaling.set_warmup(max(1, round(self.options.warmup_epochs * steps_per_epoch)))
