"""Calling the model's own methods from kscale's: the class's `fit`, `compile`, ... (Keras', or the
user's override), with the arguments by name as that method receives them."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from kscale.errors import ModelError


def own(model: Any, name: str) -> Callable[..., Any]:
    """The method `name` of the model's own class (Keras', or the user's override), bound to the model.

    An override of the user's may not take every argument kscale passes (its part of the data, its
    callbacks, steps): dropping one would train wrong, so that is a ModelError saying how to fix it."""
    method = getattr(type(model), name)

    def call(*args: Any, **kwargs: Any) -> Any:
        taken, takes_any = _keywords(method)
        refused = sorted(set(kwargs) - taken) if not takes_any else []
        if refused:
            raise ModelError(
                f"{type(model).__name__}.{name}() (your override) takes no {', '.join(refused)}, which kscale "
                f"passes to it (each worker's part of the data, its callbacks and step counts). Give it "
                f"**kwargs and pass them on: `def {name}(self, *args, **kwargs): ... super().{name}(*args, "
                "**kwargs)`."
            )
        return method(model, *args, **kwargs)

    return call


def takes(model: Any, name: str, parameter: str) -> bool:
    """Whether the class's own `name` takes `parameter` (a GAN's compile takes no optimizer)."""
    return parameter in inspect.signature(getattr(type(model), name)).parameters


def refuses(model: Any, name: str, **kwargs: Any) -> bool:
    """Whether the class's own `name` cannot be called with these arguments."""
    try:
        inspect.signature(getattr(type(model), name)).bind(model, **kwargs)
    except TypeError:
        return True
    return False


def arguments(model: Any, name: str, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by name, as the class's own method would receive them (positional ones too);
    by Keras' own signature where the class's takes `*args` (an override passing everything on)."""
    signature = inspect.signature(getattr(type(model), name))
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values()):
        signature = inspect.signature(_keras_method(type(model), name))
    bound = signature.bind(model, *args, **kwargs).arguments
    named: dict[str, Any] = {}
    for parameter in list(signature.parameters.values())[1:]:
        if parameter.name not in bound:
            continue
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            named.update(bound[parameter.name])
        else:
            named[parameter.name] = bound[parameter.name]
    return named


@functools.cache
def _keras_method(cls: type, name: str) -> Callable[..., Any]:
    """Keras' own `name` among `cls`'s bases (the class's own where no Keras class defines it)."""
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in ("keras", "tf_keras") and name in vars(klass):
            return vars(klass)[name]
    return getattr(cls, name)


@functools.cache
def _keywords(method: Callable[..., Any]) -> tuple[frozenset[str], bool]:
    """The keyword arguments `method` takes, and whether it takes any (**kwargs)."""
    parameters = inspect.signature(method).parameters.values()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    return frozenset(p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL), takes_any
