"""What runs in each step of a distributed model, in one place.

Keras calls `model.train_step` and `model.test_step` (on JAX with the state first) from the functions
fit, evaluate and *_on_batch trace. `bind` sets both once per model, as instance attributes (as Keras
sets `model.train_function`; kscale/distributed_model.py says why the class is not changed), each the
model's own step inside kscale's layers, outermost first:

1. `step_weights.around`: the batch's gradient weight taken off (a step whose replicas' slices differ
   in size, kscale.step_weights) and the step run as one replica's of R (kscale.loss_reduction);
2. the backend's, `Backend.around_steps` (under a tf.distribute strategy, backends/_replica_mean: Keras'
   losses left undivided while the step is traced, and a train_step of the user's own returning the
   replicas' mean of what it computed);
3. the model's own train_step and test_step: its class's (the user's or Keras'), or one set on the
   instance before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: A layer of kscale around a model's steps: (train_step, test_step) -> the two it runs instead.
Layer = Callable[[Callable[..., Any], Callable[..., Any]], tuple[Callable[..., Any], Callable[..., Any]]]


def bind(model: Any, layers: Sequence[Layer | None]) -> None:
    """Give `model` its steps inside `layers` (innermost first; None: none), once per model: a model
    distributed again keeps the steps it was given."""
    if "_kscale_steps" in vars(model):
        return
    train_step, test_step = model.train_step, model.test_step
    for layer in layers:
        if layer is not None:
            train_step, test_step = layer(train_step, test_step)
    object.__setattr__(model, "train_step", train_step)
    object.__setattr__(model, "test_step", test_step)
    object.__setattr__(model, "_kscale_steps", True)
