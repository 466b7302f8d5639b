"""Under a tf.distribute strategy, every optimizer gets the mean of the replicas' gradients, however the
training step computed its loss.

Each replica computes its loss as one process would on its slice (Keras' division of its losses by the
replicas, `scale_loss_for_distribution`, is turned into nothing in every step kscale runs:
kscale._keras_private.on_distribution_loss_scaling), whether Keras computes it (the built-in train_step,
`compute_loss` and an override of it adding terms of its own, `compiled_loss`, Keras 3's Loss objects) or
a train_step of the user's own does (`tf.reduce_mean(...)`, keras.io's lower-level pattern). The optimizer
then divides the replicas' summed gradients by their number: the mean, as Horovod gives it. Only a step that
divides by the global batch itself (`tf.nn.compute_average_loss(..., global_batch_size=...)`, TensorFlow's
custom-loop guide) is left as TensorFlow sums it: kscale notes that division while the step is traced.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from kscale import _keras_private, step_weights
from kscale.model_steps import Layer
from kscale.subclassing import same_named_subclass

#: Per thread (MirroredStrategy traces each replica's step in a thread of its own): whether Keras
#: divided a loss by the replicas since the step began or since the last update.
_traced = threading.local()


def keras_divided_a_loss() -> None:
    _traced.divided = True


def _take_divided() -> bool:
    divided = getattr(_traced, "divided", False)
    _traced.divided = False
    return divided


def _step_begins() -> None:
    _traced.divided = False


def in_own_step() -> bool:
    """Whether a step kscale runs is being traced in this thread: Keras then leaves its losses undivided
    (kscale._keras_private.on_distribution_loss_scaling), so that what the step computes and tracks is what
    one process does on the replica's slice, and the gradients are divided here instead."""
    return getattr(_traced, "in_step", False)


def _replicas_mean(outputs: Any) -> Any:
    """Each floating-point tensor the step returns, as the mean over the replicas (one collective for all).

    Keras 2 reduces a step's outputs across replicas with a sum ("auto"): right for the built-in steps,
    whose outputs are metric results Keras already agreed on, and N times a loss that a train_step of the
    user's own returns as it computed it (keras.io's Distiller: `{"student_loss": ..., **metrics}`), in
    every value of History where one is such (Keras then keeps the step's logs, not the metrics').
    With the mean taken here and Keras asked for the first replica's value, one process's number."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return outputs
    flat = tf.nest.flatten(outputs)
    floats = [i for i, v in enumerate(flat) if tf.is_tensor(v) and v.dtype.is_floating]
    if not floats:
        return outputs
    means = context.all_reduce(tf.distribute.ReduceOp.MEAN, [tf.identity(flat[i]) for i in floats])
    for i, mean in zip(floats, means):
        flat[i] = mean
    return tf.nest.pack_sequence_as(outputs, flat)


def around_steps(model: Any, base: type, several_workers: bool = False) -> Layer:
    """kscale.model_steps' layer under a strategy: each (traced) train_step starts with nothing noted, so
    evaluation's losses never count, and Keras leaves its losses undivided while a step is traced.

    Where the class writes its own train_step or test_step (not `base`'s) and Keras would sum their
    outputs over the replicas (Keras 2), they return the replicas' mean instead (`_replicas_mean`). Keras'
    own steps across workers (MultiWorkerMirroredStrategy) return the first replica's running metrics: Keras
    2 sums each worker's own ("auto"), an accuracy of 1.5 on two workers in the progress bar and in every
    batch's logs; the first replica's are what Horovod's progress bar shows (rank 0's), and the epoch's
    logs are read from the metrics' summed states either way."""
    keras2_sum = getattr(model, "distribute_reduction_method", None) == "auto"  # Keras 2's "auto": a sum
    own_steps = type(model).train_step is not base.train_step or type(model).test_step is not base.test_step
    mean_outputs = keras2_sum and own_steps
    if keras2_sum and (several_workers or own_steps):
        model.distribute_reduction_method = "first"
    finish = _replicas_mean if mean_outputs else (lambda outputs: outputs)

    def layer(step: Callable[..., Any], test: Callable[..., Any]) -> tuple[Callable, Callable]:
        def train_step(data: Any) -> Any:
            _step_begins()
            _traced.in_step = True
            try:
                return finish(step(data))
            finally:
                _traced.in_step = False

        def test_step(data: Any) -> Any:
            _traced.in_step = True
            try:
                return finish(test(data))
            finally:
                _traced.in_step = False

        return train_step, test_step

    return layer


def _per_replica(gradients: list) -> list:
    """The gradients divided by the replicas, unless the step divided its loss by the global batch itself;
    weighted by the replica's share of a step whose slices differ in size (kscale.step_weights). A sparse
    gradient (an Embedding's IndexedSlices) stays sparse: Keras 3's optimizers update only its rows."""
    gradients = step_weights.scale(gradients)
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if _take_divided() or replicas == 1 or tf.distribute.in_cross_replica_context():
        return gradients
    return [None if g is None else step_weights.times(g, 1.0 / replicas) for g in gradients]


def _replicas_mean_of(gradients: list) -> list:
    """Keras 3: the replicas' mean of the gradients, taken before the optimizer clips them (Keras 3 clips
    each replica's own, then sums: a `global_clipnorm` of 1 clipped the replicas' halves, not their
    whole). One all-reduce, as Keras' own; the optimizer then finds them reduced (`_reduced_class`)."""
    gradients = _per_replica(gradients)
    context = tf.distribute.get_replica_context()
    present = [g for g in gradients if g is not None]
    if context is None or context.num_replicas_in_sync == 1 or not present:
        return gradients
    reduced = iter(context.all_reduce(tf.distribute.ReduceOp.SUM, present))
    return [None if g is None else next(reduced) for g in gradients]


@functools.cache
def _averaging_class(base: type) -> type:
    """`base` with the replicas' mean applied where the optimizer aggregates (Keras 2) or applies (Keras 3)."""
    if hasattr(base, "aggregate_gradients"):  # Keras 2.11+ optimizers: where the replicas' sum is taken

        def aggregate_gradients(self: Any, grads_and_vars: Any) -> Any:
            pairs = list(grads_and_vars)
            divided = _per_replica([g for g, _ in pairs])
            return base.aggregate_gradients(self, list(zip(divided, [v for _, v in pairs])))

        namespace = {"aggregate_gradients": aggregate_gradients}
    else:  # Keras 3: apply() takes every path's gradients (apply_gradients, minimize, train_step)

        def apply(self: Any, grads: Any, trainable_variables: Any = None) -> Any:
            return base.apply(self, _replicas_mean_of(list(grads)), trainable_variables)

        namespace = {"apply": apply}
    return same_named_subclass(base, namespace)


@functools.cache
def _reduced_class(base: type) -> type:
    """Keras 3: `base` taking the gradients it applies as reduced over the replicas already."""
    namespace = {_keras_private.KERAS3_GRADIENT_ALL_REDUCE: lambda self, grads_and_vars: list(grads_and_vars)}
    return same_named_subclass(base, namespace)


def averaging(optimizer: Any) -> Any:
    """`optimizer`, now averaging. Keras 2: where a mixed-precision loss-scale optimizer wraps it, the inner
    one, which aggregates. Keras 3: the one the step calls `apply` on, in the thread that traced the loss
    (its loss-scale optimizer applies the inner one from a cross-replica merge_call), reducing the
    gradients there; the one that updates the weights takes them as reduced."""
    inner = getattr(optimizer, "inner_optimizer", None)
    keras_2 = hasattr(type(inner if inner is not None else optimizer), "aggregate_gradients")
    target = inner if keras_2 and inner is not None else optimizer
    if keras_2 or hasattr(type(target), "apply"):
        target.__class__ = _averaging_class(type(target))
    if not keras_2:
        updating = inner if inner is not None else optimizer
        updating.__class__ = _reduced_class(type(updating))
    return optimizer
