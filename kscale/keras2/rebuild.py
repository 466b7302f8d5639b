"""Taking a built, compiled tf.keras model apart and putting it together again, unchanged but for placement
(what both Keras families share: kscale.rebuild).

Strategy backends must create variables inside `strategy.scope()`; a model built outside it is rebuilt
there with Keras' own `clone_model`, its build config and its weights. The optimizer is rebuilt from its
config with the scaled learning rate; losses and metrics are new objects of the same configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from kscale import _keras_private
from kscale.errors import ModelError
from kscale.keras2 import loss_scaling
from kscale.rebuild import BUILD_IT_IN_SCOPE, fresh_compile_args, require_compiled


def check_model(model: Any) -> tf.keras.Model:
    """A compiled tf.keras Model (built, or built on its first batch), or a ModelError saying what it is not."""
    if not isinstance(model, tf.keras.Model):
        raise ModelError(
            f"kscale.distribute() takes a tf.keras.Model, got {type(model).__module__}.{type(model).__name__}. "
            "Build your model with tf.keras (Keras 2.15: `import tensorflow as tf; tf.keras.Sequential(...)`); "
            "Keras 3 (`import keras` with keras>=3) models are not supported on TensorFlow 2.15."
        )
    require_compiled(model)
    return model


def existing_variables(model: tf.keras.Model) -> list[tf.Variable]:
    """The model's variables that exist: none for a model built on its first batch, before it; those of
    its sub-models for a model without call() (keras.io's GAN), which is never built itself."""
    try:
        variables = list(model.variables)
    except ValueError:  # Keras 2: a subclass with its own build(), not built yet
        return []
    # Not a lookup layer's table, which Keras lists among them as a handler (StringLookup's vocabulary)
    return [v for v in variables if isinstance(v, tf.Variable)]


def clone_compile_args(args: dict, created_here: Callable[[Any], bool]) -> dict:
    """Compile arguments whose metric and loss objects are new instances, but the metrics whose variables
    were all `created_here` (the backend's test: in its strategy's scope, after `import kscale`), which stay
    the user's own."""

    def in_strategy(obj: Any) -> bool:
        variables = getattr(obj, "variables", None) if isinstance(obj, tf.keras.metrics.Metric) else None
        return variables is not None and all(created_here(v) for v in variables)

    return fresh_compile_args(args, tf.keras, tf.nest.map_structure, keep=in_strategy)


def inner_optimizer(optimizer: Any) -> Any:
    """The optimizer that updates the weights: under a mixed_float16 policy Keras' compile wraps it in a
    LossScaleOptimizer, which holds no learning rate of its own."""
    if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
        return optimizer.inner_optimizer
    return optimizer


def with_inner(optimizer: Any, change: Callable[[Any], Any]) -> Any:
    """`change(optimizer)`; for a LossScaleOptimizer, a new one with the same loss-scale settings around
    `change(inner optimizer)`: a new rate goes to the inner optimizer, and Horovod's DistributedOptimizer
    goes inside the loss scaling, where the gradients it averages are already unscaled."""
    if not isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
        return change(optimizer)
    scaling = tf.keras.mixed_precision.LossScaleOptimizer(
        change(optimizer.inner_optimizer),
        dynamic=optimizer.dynamic,
        initial_scale=optimizer.initial_scale,
        dynamic_growth_steps=optimizer.dynamic_growth_steps,
    )
    return loss_scaling.as_one_process(scaling)  # each replica's backward pass carries one process's numbers


def learning_rate_of(optimizer: Any) -> float | tf.keras.optimizers.schedules.LearningRateSchedule:
    """The optimizer's learning rate as given by the user: a float or the schedule object."""
    optimizer = inner_optimizer(optimizer)
    lr = _keras_private.learning_rate_object(optimizer)
    if isinstance(lr, tf.keras.optimizers.schedules.LearningRateSchedule):
        return lr
    if lr is None:
        raise ModelError(f"optimizer {type(optimizer).__name__} has no learning rate kscale can scale.")
    if callable(lr) and not isinstance(lr, tf.Variable):
        raise ModelError(
            f"optimizer {type(optimizer).__name__} has a callable learning rate kscale cannot scale; "
            "use a float or a tf.keras.optimizers.schedules.LearningRateSchedule, or lr_scaling='none'."
        )
    return float(tf.keras.backend.get_value(lr))


def clone_optimizer(optimizer: Any, learning_rate: Any) -> Any:
    """A new optimizer of the same class and settings with `learning_rate` instead of the old one."""

    def clone(inner: Any) -> Any:
        config = inner.get_config()
        config.pop("is_legacy_optimizer", None)
        config["learning_rate"] = learning_rate
        return inner.__class__.from_config(config)

    return with_inner(optimizer, clone)


def rebuild_in_scope(
    model: tf.keras.Model, strategy: tf.distribute.Strategy, weights: list[np.ndarray] | None = None
) -> tf.keras.Model:
    """The same architecture, built inside `strategy.scope()`, holding `model`'s weights (or `weights`)."""
    with strategy.scope():
        clone = _clone(model)
    if not existing_variables(model):  # built on its first batch, in the scope (see build_on_first_batch)
        return clone
    weights = model.get_weights() if weights is None else weights
    with strategy.scope():
        if not clone.built:
            _build_like(clone, model)
        _check_same_weights(weights, clone.weights, model.name)
        clone.set_weights(weights)
    return clone


def _clone(model: tf.keras.Model) -> tf.keras.Model:
    """Keras' clone_model: Sequential and functional models layer by layer, others through their config."""
    try:
        model.get_config()
    except NotImplementedError:
        raise ModelError(
            f"subclassed model {type(model).__name__} has no get_config(), so kscale cannot rebuild it "
            "inside the distribution strategy's scope. Either implement get_config() (returning the "
            "arguments of __init__) or " + BUILD_IT_IN_SCOPE + "."
        ) from None
    try:
        clone = tf.keras.models.clone_model(model)
    except Exception as err:  # the user's get_config/from_config: anything can go wrong there
        raise ModelError(
            f"cloning model {model.name!r} with Keras' clone_model, i.e. "
            f"{type(model).__name__}.from_config(model.get_config()) failed ({err}); fix get_config() so "
            "it returns the __init__ arguments, or " + BUILD_IT_IN_SCOPE + "."
        ) from err
    _keep_synchronized(model, clone)
    return clone if type(clone) is type(model) else _as_class_of(model, clone)


def _keep_synchronized(model: tf.keras.Model, clone: tf.keras.Model) -> None:
    """tf.keras' BatchNormalization leaves `synchronized=True` out of its config, so clone_model makes a
    layer that normalizes by each replica's slice alone (generated program g0565: a model built again
    outside the strategy after a first fit). The setting, and the unfused kernel it implies, carried over
    to the copy's layer of the same place and name."""
    batch_norm = tf.keras.layers.BatchNormalization
    originals = [layer for layer in model.submodules if isinstance(layer, batch_norm)]
    copies = [layer for layer in clone.submodules if isinstance(layer, batch_norm)]
    for original, copy in zip(originals, copies, strict=True):
        if getattr(original, "synchronized", False):
            if copy.name != original.name:
                raise ModelError(
                    f"cannot tell which layer of the copy of {model.name!r} is its synchronized "
                    f"BatchNormalization {original.name!r}; " + BUILD_IT_IN_SCOPE + "."
                )
            copy.synchronized = True
            copy.fused = False


def _as_class_of(model: tf.keras.Model, clone: tf.keras.Model) -> tf.keras.Model:
    """Keras 2's clone_model copies a subclass of the functional Model (keras.io's `CustomModel(inputs,
    outputs)` with its own train_step) as a plain functional Model: training the copy would silently run
    Keras' train_step instead of the user's. The user's class around the copied graph, built as such
    classes are: `Class(inputs, outputs)`."""
    try:
        rebuilt = type(model)(inputs=clone.inputs, outputs=clone.outputs, name=model.name)
    except Exception as err:  # the user's __init__ takes other arguments
        raise ModelError(
            f"cannot rebuild model {model.name!r} of class {type(model).__name__} inside the distribution "
            f"strategy's scope: Keras' clone_model gives a plain functional Model (without the class's own "
            f"methods, such as train_step), and {type(model).__name__}(inputs=..., outputs=...) failed "
            f"({err}). Create the model inside `with kscale.scope():` and pass that."
        ) from err
    if type(rebuilt) is not type(model):
        raise ModelError(
            f"{type(model).__name__}(inputs=..., outputs=...) returned a {type(rebuilt).__name__}, so kscale "
            "cannot rebuild the model inside the strategy's scope. Create it inside `with kscale.scope():`."
        )
    return rebuilt


def _build_like(clone: tf.keras.Model, model: tf.keras.Model) -> None:
    """Create the clone's weights from what the original was built with (a subclassed model's input)."""
    spec = model.save_spec(dynamic_batch=False)
    if spec is not None:  # the original was called on data: call the clone on zeros of the same spec
        args, kwargs = spec
        zeros = tf.nest.map_structure(
            lambda s: tf.zeros([1 if d is None else d for d in s.shape], s.dtype), (args, kwargs)
        )
        clone(*zeros[0], **zeros[1])
        return
    build_config = model.get_build_config()
    if not build_config:
        raise ModelError(
            f"cannot tell which inputs subclassed model {type(model).__name__} takes; call it once on a "
            "batch before kscale.distribute(), or create it inside `with kscale.scope():`."
        )
    clone.build_from_config(build_config)


def _check_same_weights(before: list[np.ndarray], after: list[tf.Variable], name: str) -> None:
    """Shapes only: reading the clone's values would reduce every sync-on-read variable (batch norm's
    moving statistics) over all replicas, one collective each (0.3 s for MobileNetV2 on 2 workers)."""
    shapes: list = []
    for weight in after:  # a lookup layer's table is a handler of num_tensors arrays in get_weights()
        has_shape = hasattr(weight, "shape")
        shapes.extend([tuple(weight.shape)] if has_shape else [None] * getattr(weight, "num_tensors", 1))
    if len(before) != len(shapes) or any(
        shape is not None and tuple(np.shape(a)) != shape for a, shape in zip(before, shapes)
    ):
        raise ModelError(
            f"rebuilding model {name!r} inside the strategy scope gave different weights "
            f"({len(before)} vs {len(after)} arrays); its get_config() does not describe it fully. "
            "Create the model inside `with kscale.scope():` instead."
        )


def carry_optimizer_state(old: Any, new: Any, model: tf.keras.Model, scope: Any) -> None:
    """Give `new` (the optimizer kscale compiled) the step count and slots `old` had, e.g. a model loaded
    from a checkpoint: a resumed job keeps its momentum and Adam moments. Nothing when `old` never trained
    or the two hold different variables (another optimizer)."""
    if new is old or old is None or not isinstance(old.variables, list) or not hasattr(new, "build"):
        return  # the same object, or a legacy optimizer (its variables are a method; it has no build)
    if int(old.iterations.numpy()) == 0:
        return
    saved = [variable.numpy() for variable in old.variables]
    with scope:
        new.build(model.trainable_variables)
    if [v.shape for v in saved] == [tuple(v.shape) for v in new.variables]:
        new.set_weights(saved)
