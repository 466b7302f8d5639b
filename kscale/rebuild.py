"""What taking a user's compiled model apart and building it again needs in both Keras families, given the
family's `keras` module (as Horovod's `_keras` takes it). What differs is in kscale/keras2/rebuild.py
(tf.keras) and kscale/keras3/rebuild.py (Keras 3)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kscale.errors import ModelError

#: Where a model that cannot be copied into a strategy's scope can be built instead (the end of a sentence).
BUILD_IT_IN_SCOPE = (
    "build the model after `import kscale`, which (TensorFlow imported first) makes the strategy the "
    "process's own, or inside `with kscale.scope():`, and pass that"
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
            return obj.__class__.from_config(obj.get_config())
        return obj

    return {
        key: map_structure(fresh, value) if key in _LOSSES_AND_METRICS else copy.copy(value)
        for key, value in args.items()
    }
