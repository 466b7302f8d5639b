"""tf.keras (Keras 2) as every backend trains it: the object a backend holds as its `family`.

tf.keras is TensorFlow's own Keras up to TF 2.15, and the `tf_keras` package after it. A backend (how a
process trains: one process, a strategy, Horovod) holds this object and hands itself to the methods that
need it; what only the model's Keras decides is here, what only the way of running decides is in the
backend. Keras 3's: kscale/keras3/family.py, with the same methods.
"""

from __future__ import annotations

import contextlib
from typing import Any

import tensorflow as tf

from kscale import _keras_private, feeds, loss_reduction, preemption, step_weights, tf_data, tf_feeds
from kscale.keras2 import backup_inside_epoch, learning_rate, rebuild
from kscale.rebuild import refuse_stateful, stateful_error

_STATEFUL_UNDER_STRATEGIES = (
    "TensorFlow does not support stateful RNNs under tf.distribute strategies. Horovod trains it as one "
    "process at the global batch, each worker holding its rows' state (`kscale run --engine horovod`, or "
    "horovodrun), with shuffle=False so that a row's next batch stays on its worker."
)


class Keras2Family:
    generation = 2
    #: How the optimizer applies the rate as written times the plan's factor (kscale.learning_rate).
    rates = learning_rate
    #: The iterators of a tf.data dataset Keras' own fit makes in one process (each draws a shuffle's order).
    fit_iterators = _keras_private.KERAS2_FIT_ITERATORS

    @staticmethod
    def keras_module() -> Any:
        """tf.keras: Keras 2.15 on TF 2.15, tf_keras where TF_USE_LEGACY_KERAS asks for it."""
        return tf.keras

    # -- the model --------------------------------------------------------------------------------------------
    def check_model(self, model: Any) -> None:
        rebuild.check_model(model)

    def rebuild_in(self, model: Any, owner: Any, weights: list | None = None) -> Any:
        """The same model built in `owner.scope()` (a tf.distribute strategy), with its weights (or `weights`)."""
        return rebuild.rebuild_in_scope(model, owner, weights)

    def fresh_compile_args(self, args: dict, created_here: Any) -> dict:
        return rebuild.clone_compile_args(args, created_here)

    def prepare_steps(self, model: Any) -> None:
        """Keras' losses reduce as one replica's in the steps kscale runs (kscale.loss_reduction)."""
        _keras_private.on_loss_reduction(tf.keras, loss_reduction.scaled_sum, loss_reduction.check)

    def first_batch_inputs(self, model: Any, x: Any) -> Any:
        """Keras 2 builds a model not built yet inside its first training step, after the weights are
        broadcast: the workers would start from different weights. The first batch of `x` to build it
        with before (Backend.build_on_first_batch); None for a generator, which Keras builds from (the
        agreement check compares the workers)."""
        return None if model.built else tf_data.first_inputs(x)

    # -- under a tf.distribute strategy: tf.keras takes what one process takes ---------------------------------
    def check_strategy_model(self, model: Any, backend_name: str) -> None:
        """A stateful RNN: TensorFlow refuses it under every tf.distribute strategy ("not yet supported")."""
        refuse_stateful(model, backend_name, _STATEFUL_UNDER_STRATEGIES)

    def strategy_made(self, backend_name: str) -> None:
        """The strategy is the process's from `import kscale` on: tf.keras refuses a stateful RNN as the
        layer is made, which kscale turns into its own BackendError."""
        _keras_private.on_stateful_rnn_refused(
            tf.keras, lambda name: stateful_error([name], backend_name, _STATEFUL_UNDER_STRATEGIES)
        )

    def strategy_steps(self) -> Any:
        """Where tf.keras' fit runs under a tf.distribute strategy: as it is."""
        return contextlib.nullcontext()

    def strategy_loading(self) -> Any:
        """Where tf.keras' load_weights runs under a tf.distribute strategy: the file's arrays read whole
        (_keras_private.h5_weights_read_whole), which a metric's state synchronised on read needs."""
        return _keras_private.h5_weights_read_whole(tf.keras)

    def strategy_placed(self, model: Any) -> None:
        """A synchronized BatchNormalization sums its statistics over the replicas as tf.keras does, with
        a gradient that weighs each replica's part by its share of a step shared unevenly
        (step_weights.weighed_sum). A model without call() trains as it is."""
        summed = step_weights.weighed_sum()  # over the strategy's replicas
        for layer in model.submodules:
            _keras_private.sum_batch_statistics_over(layer, summed)

    def strategy_model_notes(self, model: Any) -> list[str]:
        """Nothing to say: tf.keras weighs every batch's losses by its size."""
        return []

    def strategy_left(self, strategy: Any, model: Any) -> None:
        """The process left `strategy`: the models built in it, but `model`, compile as if built outside."""
        _keras_private.unset_models_strategy(strategy, keep=model)

    def adopt_into_strategy(self, model: Any, strategy: Any) -> bool:
        """Whether `model`, built outside `strategy`, has every weight in it, and now trains in it itself:
        keras.io's Distiller made after its teacher trained holds no weight of its own, only its student
        and teacher, built in the strategy (after `import kscale`, or distributed before)."""
        variables = rebuild.existing_variables(model)
        if not variables or not all(strategy.extended.variable_created_in_scope(v) for v in variables):
            return False
        _keras_private.set_model_strategy(model, strategy)
        return True

    def check_strategy_compile(
        self, args: dict, optimizer: Any, options: Any, backend_name: str, replicas: int
    ) -> None:
        """Nothing to refuse."""

    # -- the optimizer and its learning rate -------------------------------------------------------------------
    def is_optimizer(self, value: Any) -> bool:
        return isinstance(value, tf.keras.optimizers.Optimizer | tf.keras.optimizers.legacy.Optimizer)

    def resolve_optimizer(self, optimizer: Any) -> Any:
        return tf.keras.optimizers.get(optimizer)

    def learning_rate_of(self, optimizer: Any) -> Any:
        return rebuild.learning_rate_of(optimizer)

    def optimizer_for(self, optimizer: Any, options: Any) -> Any:
        """The user's own optimizer, applying its rate scaled (before a backend wraps it)."""
        return learning_rate.with_scaled_class(optimizer)

    def clone_optimizer(self, optimizer: Any, options: Any) -> Any:
        """A new optimizer of the same class and settings (created where a strategy needs its variables)."""
        return rebuild.clone_optimizer(optimizer, rebuild.learning_rate_of(optimizer))

    def allow_own_losses(self, model: Any) -> None:
        """The Loss objects the model holds (a GAN's loss_fn, a Distiller's student_loss_fn), called in its
        own train_step, may take their default reduction under a tf.distribute strategy."""
        for value in vars(model).values():
            if isinstance(value, tf.keras.losses.Loss):
                _keras_private.allow_replica_batch_mean(value)

    def carry_optimizer_state(self, old_optimizer: Any, model: Any, scope: Any) -> None:
        """A loaded checkpoint's momentum, moments and steps, into model.optimizer, made in `scope`."""
        rebuild.carry_optimizer_state(old_optimizer, model.optimizer, model, scope)

    def epoch_orders(self, model: Any, count: int, batch_size: int, epochs: int, shuffle: Any) -> Any:
        """The order of `count` array samples in each epoch of one process's fit of `model` (an epochs ×
        count array), drawn as Keras draws it, and what to call when fit ends, with the epochs it began (or
        None) (_keras_private.array_orders)."""
        return _keras_private.array_orders(tf.keras, count, batch_size, epochs, shuffle)

    def batch_orders(self, model: Any, count: int, epochs: int) -> Any:
        """The order of the `count` batches of a Sequence / PyDataset in each epoch of one process's fit of
        `model` with shuffle=True (an epochs × count array), drawn as Keras draws it, and what to call when
        fit ends, with the epochs it began."""
        return _keras_private.batch_orders(tf.keras, count, epochs, False)

    # -- data and callbacks ---------------------------------------------------------------------------
    def worker_part(self, x: Any, y: Any, sample_weight: Any, request: Any) -> Any:
        part = tf_data.worker_part(x, y, sample_weight, request)
        if part.kind is feeds.Kind.ARRAYS and (part.last_step is not None or part.orders is not None):
            return tf_feeds.weighted_batches_part(part, request)
        return part

    def collectively_saving_callbacks(self) -> tuple[type, ...]:
        """Where saving is collective (MultiWorkerMirroredStrategy), these save through collectives and must
        run on every worker (TensorFlow sends the other workers' copies to scratch folders and deletes them)."""
        return (tf.keras.callbacks.TensorBoard, tf.keras.callbacks.BackupAndRestore)

    def backup_to_share(self) -> type | None:
        """Nothing: tf.keras' BackupAndRestore runs on every worker as its backend runs it."""
        return None

    def backup_companions(self, callback: Any, backend: Any) -> list:
        """What runs after `callback`, a BackupAndRestore that backs up inside an epoch: what resumes such a
        backup at the batch after it, exactly (kscale/keras2/backup_inside_epoch.py)."""
        backup = tf.keras.callbacks.BackupAndRestore
        if isinstance(callback, backup) and preemption.backs_up_inside_an_epoch(callback):
            return [backup_inside_epoch.ResumeInsideEpoch(callback, backend)]
        return []
