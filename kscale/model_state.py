"""What kscale keeps on a distributed model: one attribute of the user's own model object, never tracked by
Keras (set with object.__setattr__), read by every method distribute() binds and by the plan, which is
planned again here when the world's size changes (elastic Horovod)."""

from __future__ import annotations

import dataclasses
from typing import Any

from kscale import log
from kscale.backends.base import Backend
from kscale.options import Options
from kscale.plan import Plan
from kscale.rate_life_cycle import RateLifeCycle

_STATE = "_kscale_state"


@dataclasses.dataclass
class ModelState:
    """What kscale keeps on a distributed model (one attribute, never tracked by Keras)."""

    backend: Backend
    options: Options
    backend_options: Any
    plan: Plan
    rates: RateLifeCycle
    optimizer: Any = None  # the optimizer as the user gave it (before the backend wrapped it)
    compile_args: dict = dataclasses.field(default_factory=dict)
    plan_printed: bool = False
    #: model.optimizer is kscale's (compiled through Keras' compile), not a placeholder of the user's own
    #: compile (a GAN's compile(d_optimizer, g_optimizer, loss_fn) leaves Keras' default there)
    scales_model_optimizer: bool = True
    #: optimizers held as attributes besides model.optimizer: name -> (the user's, kscale's)
    own_optimizers: dict = dataclasses.field(default_factory=dict)
    #: fit's validation data is evaluated whole on every process (Backend.evaluates_whole)
    validation_whole: bool = False


def state_of(model: Any) -> ModelState | None:
    """kscale's state on a distributed model, or None for any other object."""
    return vars(model).get(_STATE) if hasattr(model, "__dict__") else None


def state(model: Any) -> ModelState:
    """kscale's state on a distributed model."""
    return vars(model)[_STATE]


def set_plan(model: Any, plan: Plan) -> None:
    """The model's plan, also as `model.kscale_plan` (the public name)."""
    state(model).plan = plan
    object.__setattr__(model, "kscale_plan", plan)


def print_plan_once(model: Any) -> None:
    """The plan, on the chief, once per world (a new world under elastic Horovod says it again)."""
    kept = state(model)
    if kept.plan_printed or not kept.options.print_plan:
        return
    kept.plan_printed = True
    log.chief(kept.plan.describe(), kept.backend.is_chief)


def attach(model: Any, kept: ModelState) -> None:
    """`kept` becomes the model's state (set past Keras' tracking of attributes)."""
    object.__setattr__(model, _STATE, kept)


def replan_world(model: Any) -> None:
    """The world's size as it is now (elastic Horovod changes it), and the rate factor for it."""
    kept = state(model)
    backend = kept.backend
    if (backend.num_workers, backend.num_replicas) == (kept.plan.num_workers, kept.plan.num_replicas):
        return
    kept.rates.for_this_world(model)
    after = kept.rates.applied(kept.rates.of(model.optimizer)) if kept.scales_model_optimizer else None
    set_plan(
        model,
        dataclasses.replace(
            kept.plan,
            num_workers=backend.num_workers,
            num_replicas=backend.num_replicas,
            learning_rate_after=after,
        ),
    )
    kept.plan_printed = False  # a new world: say what it does
