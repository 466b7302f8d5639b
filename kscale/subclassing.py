"""The classes kscale gives the user's own Keras objects (an optimizer that scales its rate or averages
its gradients, a metric that weighs a short last step): a subclass of the object's class, named, placed
and registered as that class, so that a file the model is saved to names the user's class and loads where
kscale is not imported.

Registration matters where a class is saved under another name than its own: tf.keras 2.15 saves AdamW
as "Custom>AdamW", and a user's `@register_keras_serializable("my_package")` class as "my_package>Name";
Keras looks the name up by class, so a subclass would be saved under its bare name, which loading cannot
find ("Unknown optimizer: 'AdamW'")."""

from __future__ import annotations

import importlib
from typing import Any

_KERAS_PACKAGES = ("keras", "tf_keras")


def same_named_subclass(base: type, namespace: dict[str, Any]) -> type:
    """A subclass of `base` with `namespace`'s attributes, saved by Keras as `base` is."""
    subclass = type(base.__name__, (base,), dict(namespace))
    save_as(subclass, base)
    return subclass


def save_as(subclass: type, base: type) -> None:
    """Keras saves `subclass` as `base`: `base`'s module and qualified name (the .keras format records the
    module) and registered name; loading that name still gives what it gave. Also for a subclass made by
    another library: Horovod's DistributedOptimizer names its class like the original "so that the saved
    model could be easily restored without Horovod", and leaves it in horovod._keras."""
    subclass.__module__, subclass.__qualname__ = base.__module__, base.__qualname__
    utils = _keras_utils_of(base)
    if utils is None:
        return
    registered = utils.get_registered_name(base)
    if registered == base.__name__ or ">" not in registered:
        return
    package, name = registered.split(">", 1)
    loaded_as = utils.get_custom_objects()  # Keras' live registry: name -> the class a file loads as
    previous = loaded_as.get(registered)
    utils.register_keras_serializable(package=package, name=name)(subclass)
    if previous is None:
        loaded_as.pop(registered, None)
    else:
        loaded_as[registered] = previous


def _keras_utils_of(base: type) -> Any:
    """`keras.utils` or `tf_keras.utils`, whichever Keras `base` comes from; None for another class."""
    for cls in base.__mro__:
        package = cls.__module__.split(".")[0]
        if package in _KERAS_PACKAGES:
            return importlib.import_module(f"{package}.utils")
    return None
