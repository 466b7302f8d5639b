"""`compile` on a distributed model: the optimizers it trains with, in the backend's form, each applying the
rate the script writes times the plan's factor (kscale/rate_life_cycle.py): model.optimizer, and those a
model holds of its own (a GAN's two; set by a compile of the user's that kscale cannot call again)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from kscale import _keras_private, loss_reduction, own_methods
from kscale.model_state import set_plan, state
from kscale.structures import flatten


def adopt_own_compile(model: Any, optimizer: Any) -> None:
    """After the user's own compile: every optimizer the model holds gets its rate scaled and the backend's
    form. model.optimizer is one of them where the class's compile takes an optimizer (and hands it to
    Keras' compile, which trains with it); otherwise it is Keras' unused default."""
    kept = state(model)
    if own_methods.takes(model, "compile", "optimizer"):
        # Keras' own compile again, with what the class's compile gave it (the optimizer, metrics): the
        # attributes the class's compile set (a Distiller's loss functions) stay, and the backend gets
        # what it needs of the rest (the metrics made anew in a strategy's scope).
        keras_compile = functools.partial(kept.backend.family.keras_module().Model.compile, model)
        args = {k: v for k, v in _keras_private.compile_arguments(model).items() if k != "optimizer"}
        _compile_optimizer(model, keras_compile, optimizer, args)
        kept.backend.family.carry_optimizer_state(optimizer, model, kept.backend.scope())
    else:
        kept.scales_model_optimizer = False
    kept.backend.family.allow_own_losses(model)
    _prepare_own_optimizers(model)


def _prepare_own_optimizers(model: Any) -> None:
    """Every optimizer the model holds as an attribute besides model.optimizer (a GAN's, set in its own
    compile or in __init__) gets what model.optimizer gets: its rate scaled, and the backend's form of it
    (averaging over workers; created in the strategy's scope). The plan lists each."""
    kept = state(model)
    backend = kept.backend
    listed = []
    for name, value in list(vars(model).items()):
        if name.startswith("_") or name == "optimizer" or not backend.family.is_optimizer(value):
            continue
        known = kept.own_optimizers.get(name)
        if known is None or value is not known[1]:  # the user's, new to kscale
            with backend.scope():
                prepared = backend.optimizer_for(value, kept.backend_options)
            kept.rates.attach(prepared)
            setattr(model, name, prepared)
            known = kept.own_optimizers[name] = (value, prepared)
        rate = kept.rates.of(known[0])
        listed.append((name, kept.rates.written(rate), kept.rates.applied(rate)))
    set_plan(model, dataclasses.replace(kept.plan, own_optimizers=tuple(listed)))


def compile_method(self, *args: Any, **kwargs: Any) -> None:
    """Keras' compile, with the learning rate scaled for the replicas and the optimizer the backend needs."""
    backend = state(self).backend
    if not own_methods.takes(self, "compile", "optimizer"):  # the user's compile (a GAN's), in the scope
        with backend.scope():
            own_methods.own(self, "compile")(*args, **kwargs)
    else:
        arguments = own_methods.arguments(self, "compile", args, kwargs)
        optimizer = arguments.pop("optimizer", "rmsprop")
        _compile_optimizer(self, own_methods.own(self, "compile"), optimizer, arguments)
    backend.family.allow_own_losses(self)  # whatever compile set (a Distiller's student_loss_fn)
    _prepare_own_optimizers(self)


def _compile_optimizer(model: Any, compile_fn: Callable[..., None], optimizer: Any, arguments: dict) -> None:
    """Compile through `compile_fn` with `optimizer` in the backend's form, applying the rate the script
    writes (now or later: callbacks, `optimizer.learning_rate = x`) times the plan's factor."""
    kept = state(model)
    backend = kept.backend
    optimizer = backend.family.resolve_optimizer(optimizer)
    rate = kept.rates.of(optimizer)
    if backend.loss_replicas > 1:
        loss_reduction.check_compiled(flatten(arguments.get("loss")), (None, "none"))
    backend.compile(compile_fn, optimizer, arguments, kept.backend_options)
    kept.optimizer, kept.compile_args = optimizer, arguments
    kept.rates.attach(model.optimizer)
    set_plan(model, dataclasses.replace(kept.plan, **kept.rates.plan_fields(rate)))
