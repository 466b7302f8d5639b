"""What taking a user's compiled model apart and building it again needs in both Keras families, given the
family's `keras` module (as Horovod's `_keras` takes it). What differs is in kscale/keras2/rebuild.py
(tf.keras) and kscale/keras3/rebuild.py (Keras 3); those two are the only places a model or optimizer is
copied, each reached through its family's `rebuild_in` / `clone_optimizer`.

Why copies are kept at all (issue 42, item 5): a strategy creates variables only in its own scope, and a
multi-process keras.distribution only collectively, so a model whose variables exist elsewhere cannot
train as it is. That model is common, not a misuse: built before `import kscale` (keras.io's examples put
imports first, but a notebook or a loaded `.keras` file may come earlier), a second model built after
the first `distribute()` left the strategy's process-wide scope, or a model given `backend=` at
`distribute()`, which picks the strategy after the model exists. Refusing it with a ModelError would break
scripts that train correctly today; the copy keeps the user's class, weights, optimizer state, losses,
metrics and lookup tables, and docs/guide/distribute.md says the object passed does not train."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kscale.errors import BackendError, ModelError

#: Where a model that cannot be copied into a strategy's scope can be built instead (the end of a sentence).
BUILD_IT_IN_SCOPE = (
    "build the model inside `with kscale.scope():` (under a tf.distribute strategy also after `import "
    "kscale`, TensorFlow imported first, which makes the strategy the process's own), and pass that"
)

#: compile() arguments holding loss and metric objects, which are created anew where they are used.
_LOSSES_AND_METRICS = ("loss", "metrics", "weighted_metrics")


def require_compiled(model: Any) -> None:
    """kscale scales the optimizer compile() gave the model: without one there is nothing to scale."""
    if getattr(model, "optimizer", None) is None:
        raise ModelError(
            f"model {model.name!r} is not compiled. Call `model.compile(optimizer=..., loss=..., "
            "metrics=...)` before `kscale.distribute(model)`: kscale scales the optimizer's learning rate "
            "and keeps your loss and metrics."
        )


def fresh_compile_args(
    args: dict,
    keras: Any,
    map_structure: Callable[[Callable, Any], Any],
    keep: Callable[[Any], bool] = lambda obj: False,
) -> dict:
    """compile() arguments whose metric and loss objects are new instances of the same configuration
    (stateful metrics must be created inside a strategy's scope), but those `keep` says are fine as they
    are (the user's own, whose state is theirs to read); the others shallow copies."""

    def fresh(obj: Any) -> Any:
        if isinstance(obj, keras.metrics.Metric | keras.losses.Loss) and not keep(obj):
            try:
                return obj.__class__.from_config(obj.get_config())
            except Exception as err:  # the user's get_config/from_config, or a lambda Keras will not load
                raise ModelError(
                    f"compile's {type(obj).__name__} {getattr(obj, 'name', '')!r} was made before the "
                    f"distribution kscale trains in, and cannot be made again there from its config ({err}). "
                    "Give it a get_config() that returns its __init__ arguments (a named function, not a "
                    "lambda, for a metric of a function)."
                ) from err
        return obj

    return {
        key: map_structure(fresh, value) if key in _LOSSES_AND_METRICS else copy.copy(value)
        for key, value in args.items()
    }


def stateful_layers(model: Any) -> list[str]:
    """The names of the stateful layers (`LSTM(stateful=True)`: state kept from batch to batch) in `model`,
    nested models included: a state sized for one replica's batch, which not every backend can hold."""
    return [layer.name for layer in submodules(model) if getattr(layer, "stateful", False) is True]


def submodules(model: Any) -> list:
    """Every layer in `model`, nested models' and wrapped ones' (Bidirectional, RNN) included."""
    found = []
    for layer in getattr(model, "layers", []):
        found.append(layer)
        found.extend(submodules(layer))
        inner = getattr(layer, "layer", None) or getattr(layer, "forward_layer", None)  # Bidirectional, RNN
        if inner is not None:
            found.append(inner)
    return found


def refuse_stateful(model: Any, backend: str, works: str) -> None:
    """A BackendError for a model with stateful layers under `backend`, which cannot hold their state,
    naming what `works`; nothing for a model without them."""
    names = stateful_layers(model)
    if names:
        raise stateful_error(names, backend, works)


def stateful_error(names: list[str], backend: str, works: str) -> BackendError:
    return BackendError(
        f"a stateful layer ({', '.join(names)}: stateful=True, its state carried from batch to batch) "
        f"cannot train under the {backend} backend: {works}"
    )
