"""What runs in each step of a distributed model, in one place.

Keras calls `model.train_step` and `model.test_step` (on JAX with the state first) from the functions
fit, evaluate and *_on_batch trace. `bind` sets both once per model, as instance attributes (as Keras
sets `model.train_function`; kscale/distributed_model.py says why the class is not changed), each the
model's own step inside kscale's layers, outermost first:

0. while a job resumed inside an epoch reads again the batches its backup had trained, Keras 3
   (kscale/callbacks/shared_backup.py): `skip_training` sets a train step that trains and logs nothing;
   tf.keras (kscale/keras2/backup_inside_epoch.py), which starts the resumed fit at the backup's step:
   `read_before_training` reads them through the test step before its first train step;
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


#: The model's train step as bind made it (also: bound already), kept while skip_training stands in for it.
_TRAINED = "_kscale_steps"


def bind(model: Any, layers: Sequence[Layer | None]) -> None:
    """Give `model` its steps inside `layers` (innermost first; None: none), once per model: a model
    distributed again keeps the steps it was given."""
    if _TRAINED in vars(model):
        return
    train_step, test_step = model.train_step, model.test_step
    for layer in layers:
        if layer is not None:
            train_step, test_step = layer(train_step, test_step)
    object.__setattr__(model, "train_step", train_step)
    object.__setattr__(model, "test_step", test_step)
    object.__setattr__(model, _TRAINED, train_step)


def skip_training(model: Any, skipping: bool) -> None:
    """From the next step on, `model`'s train steps train nothing (`skipping`) or train again, its train
    function made anew. Another function, not a switch the step reads: JAX keeps a function's trace."""
    step = _training_nothing(model) if skipping else vars(model)[_TRAINED]
    object.__setattr__(model, "train_step", step)
    if getattr(model, "train_function", None) is not None:
        model.make_train_function(force=True)


def _training_nothing(model: Any) -> Callable[..., Any]:
    def step(*args: Any) -> Any:
        if len(args) == 2:  # Keras 3 on JAX passes the state first and takes it back: (logs, state)
            return {}, args[0]
        return model.get_metrics_result()  # the logs a step returns (TensorFlow's trainer needs some)

    return step


def read_before_training(model: Any, count: int, then: Callable[[], None]) -> None:
    """tf.keras: the next call of `model.train_function` first reads `count` batches of its iterator through
    the model's test step (nothing trained: the data goes on, the step's metrics are built), then calls
    `then()`, then trains; later calls train only. Keras itself sets `train_function` on the model."""
    import tensorflow as tf

    train = model.train_function
    strategy = model.distribute_strategy

    @tf.function
    def read(iterator: Any) -> None:
        strategy.run(model.test_step, args=(next(iterator),))

    def first(iterator: Any) -> Any:
        for _ in range(count):
            read(iterator)
        model.train_function = train
        then()
        return train(iterator)

    model.train_function = first
