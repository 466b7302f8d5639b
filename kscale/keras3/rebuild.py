"""Taking a built, compiled Keras 3 model apart and putting it together again, unchanged but for placement
(what both Keras families share: kscale.rebuild; tf.keras's: kscale.keras2.rebuild).

A strategy or a keras.distribution must create the variables itself: a model built outside is rebuilt in
its scope with Keras' own clone, build config and weights. The optimizer is rebuilt from its config with
the scaled learning rate; losses and metrics are new objects of the same configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from kscale import _keras_private
from kscale.errors import ModelError
from kscale.keras3 import loss_scaling
from kscale.rebuild import BUILD_IT_IN_SCOPE, require_compiled
from kscale.rebuild import fresh_compile_args as _fresh_compile_args


def check_model(model: Any) -> None:
    """A compiled Keras 3 model, or a ModelError saying what it is not."""
    require_compiled(model)


def rebuild_in(model: Any, owner: Any, weights: list | None = None) -> Any:
    """The same model built in `owner.scope()` (a strategy or a keras.distribution), with its weights (or
    `weights`)."""
    weights = [np.asarray(w) for w in (model.get_weights() if weights is None else weights)]
    with owner.scope():
        try:
            clone = _keras_private.clone_uncompiled(keras, model)
        except Exception as err:  # the user's get_config/from_config: anything can go wrong there
            raise ModelError(
                f"cloning model {model.name!r} with keras.models.clone_model failed ({err}). Fix its "
                "get_config() so it returns the __init__ arguments, or " + BUILD_IT_IN_SCOPE + "."
            ) from err
        if not model.built:  # Keras builds it on its first batch, in the scope its fit enters
            copy_preprocessing_state(model, clone)
            return clone
        if not clone.built:
            build_config = model.get_build_config()
            if not build_config:
                raise ModelError(
                    f"cannot tell which inputs model {type(model).__name__} takes; call it once on a batch "
                    "before kscale.distribute(), or build it inside `with kscale.scope():`."
                )
            clone.build_from_config(build_config)
        clone.set_weights(weights)
        copy_preprocessing_state(model, clone)
    return clone


def copy_preprocessing_state(source: Any, copy: Any) -> None:
    """What `copy`, a clone of `source` given its weights, lacks of its preprocessing layers' adapted state:
    the vocabularies of the lookup layers (StringLookup, IntegerLookup, TextVectorization; no weight, not
    in the config: "Table not initialized" at the copy's first step), and the constants Normalization and
    Discretization compute from their weights when they are loaded (`finalize_state`, as Keras' own
    loading calls it; set_weights does not)."""
    for original, cloned in zip(_all_layers(source), _all_layers(copy)):
        if hasattr(original, "get_vocabulary") and hasattr(cloned, "set_vocabulary"):
            vocabulary = original.get_vocabulary()
            if vocabulary and cloned.get_vocabulary() != vocabulary:
                if getattr(original, "output_mode", None) == "tf_idf":
                    raise ModelError(
                        f"layer {original.name!r} is a TF-IDF lookup layer, whose adapted weights kscale "
                        "cannot copy into the copy of the model it makes. Build the model after `import "
                        "kscale` (no copy is made then), or pass its vocabulary and idf_weights to the "
                        "layer's constructor."
                    )
                cloned.set_vocabulary(vocabulary)
        if hasattr(cloned, "finalize_state") and cloned.built:
            cloned.finalize_state()


def _all_layers(model: Any) -> list:
    """`model`'s layers and those of the models it holds, depth first, in Keras' order."""
    found = []
    for layer in getattr(model, "layers", []):
        found.append(layer)
        found.extend(_all_layers(layer))
    return found


def fresh_compile_args(args: dict, created_here: Callable[[Any], bool]) -> dict:
    """Compile arguments whose metric objects are new instances (created where they are used), but the
    user's own metrics whose variables were all `created_here` (the backend's test: in its strategy's scope,
    on its devices) and the losses (Keras 3's are stateless), which stay as they are: a metric of a lambda
    cannot be made again from its config, and the user reads their own objects' state."""

    def keep(obj: Any) -> bool:
        return isinstance(obj, keras.losses.Loss) or all(created_here(v) for v in obj.variables)

    return _fresh_compile_args(args, keras, keras.tree.map_structure, keep=keep)


def learning_rate_of(optimizer: Any) -> Any:
    """The optimizer's learning rate as the user gave it: a float or the schedule object."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):  # compile's, under mixed_float16
        optimizer = optimizer.inner_optimizer
    rate = _keras_private.learning_rate_object(optimizer)
    if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
        return rate
    if rate is None or (callable(rate) and not isinstance(rate, keras.Variable)):
        raise ModelError(
            f"optimizer {type(optimizer).__name__} has a learning rate kscale cannot scale; use a float or a "
            "keras.optimizers.schedules.LearningRateSchedule, or lr_scaling='none'."
        )
    return float(keras.ops.convert_to_numpy(rate))


def clone_optimizer(optimizer: Any, learning_rate: Any, gradient_accumulation_steps: int = 1) -> Any:
    """A new optimizer of the same class and settings with `learning_rate` (and the accumulation asked);
    for a LossScaleOptimizer (compile's, under mixed_float16), the same loss scaling around a new inner
    optimizer, which holds the rate."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        scaling = keras.optimizers.LossScaleOptimizer(
            clone_optimizer(optimizer.inner_optimizer, learning_rate, gradient_accumulation_steps),
            initial_scale=optimizer.initial_scale,
            dynamic_growth_steps=optimizer.dynamic_growth_steps,
        )
        return loss_scaling.as_one_process(scaling)  # each replica's backward pass: one process's numbers
    config = optimizer.get_config()
    config["learning_rate"] = learning_rate
    if gradient_accumulation_steps > 1:
        config["gradient_accumulation_steps"] = gradient_accumulation_steps
    return optimizer.__class__.from_config(config)


def carry_optimizer_state(old: Any, new: Any, model: Any, scope: Any) -> None:
    """Give `new` (the optimizer kscale compiled) the step count and slots of `old`, when `old` was built
    and trained (a model from keras.models.load_model, a model trained before distribute()): a resumed
    job keeps its Adam moments, momentum and step count. The learning rate is left as compiled (scaled
    for this world). `new` is built in `scope` (the strategy's, or the distribution's: on JAX, creating
    variables is collective, and every process gets here). Nothing when the two hold other variables."""
    if new is old or old is None or not getattr(old, "built", False):
        return
    if int(keras.ops.convert_to_numpy(old.iterations)) == 0:
        return
    saved = [np.asarray(keras.ops.convert_to_numpy(v)) for v in _state_variables(old)]
    if not getattr(new, "built", False):
        with scope:
            new.build(model.trainable_variables)
    targets = _state_variables(new)
    if [v.shape for v in saved] != [tuple(v.shape) for v in targets]:
        return
    for variable, value in zip(targets, saved):
        variable.assign(value)


def _state_variables(optimizer: Any) -> list:
    """The optimizer's variables but its learning rate(s): the step count, slots, loss scale."""
    optimizers = [optimizer]
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizers.append(optimizer.inner_optimizer)
    rates = {id(_keras_private.learning_rate_object(o)) for o in optimizers}
    return [v for v in optimizer.variables if id(v) not in rates]
