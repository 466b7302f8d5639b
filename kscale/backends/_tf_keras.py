"""What every backend for tf.keras models shares: optimizers, learning rates, feeding and callbacks.

tf.keras is Keras 2: TensorFlow's own up to TF 2.15, and the `tf_keras` package after it. A backend for
tf.keras models subclasses `TFKerasBackend` and overrides only what its way of running changes.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from kscale import sharding, tf_data
from kscale.backends.base import Backend
from kscale.callbacks import for_this_worker
from kscale.keras2 import learning_rate as family_rates
from kscale.keras2 import rebuild


class TFKerasBackend(Backend):
    """A backend that trains tf.keras models; alone, one process per replica."""

    keras_generation = 2
    learning_rates = family_rates.RATES
    # Keras 2 evaluates one process's data alone, and under a tf.distribute strategy hands empty batches to
    # replicas that have run out until every worker has (partial-batch handling).
    uneven_evaluation = True

    @staticmethod
    def keras_module() -> Any:
        """tf.keras: Keras 2.15 on TF 2.15, tf_keras where TF_USE_LEGACY_KERAS asks for it."""
        return tf.keras

    def check_model(self, model: Any) -> None:
        rebuild.check_model(model)

    def build_on_first_batch(self, model: Any, x: Any) -> None:
        """Keras 2 builds such a model inside its first training step, after the weights are broadcast:
        the workers would start from different weights. Build it before, in this backend's scope, from the
        first batch of `x`, and agree on its weights as for a model built before distribute()."""
        if model.built:
            return
        inputs = tf_data.first_inputs(x)
        if inputs is None:  # a generator: Keras builds it; the agreement check compares the workers
            return
        try:
            with self.scope():
                model(inputs, training=False)
        except NotImplementedError:  # no call() (keras.io's GAN): its sub-models were built and placed
            return
        self.place_model(model)  # in this backend's scope already: the workers' weights are made equal

    def is_optimizer(self, value: Any) -> bool:
        return isinstance(value, tf.keras.optimizers.Optimizer | tf.keras.optimizers.legacy.Optimizer)

    def resolve_optimizer(self, optimizer: Any) -> Any:
        return tf.keras.optimizers.get(optimizer)

    def learning_rate_of(self, optimizer: Any) -> Any:
        return rebuild.learning_rate_of(optimizer)

    def carry_optimizer_state(self, old_optimizer: Any, model: Any) -> None:
        rebuild.carry_optimizer_state(old_optimizer, model.optimizer, model, self.scope())

    def rate_factor_variable(self, optimizer: Any, factor: float) -> Any:
        # An attribute of the optimizer: TensorFlow's object-based checkpoints (BackupAndRestore, the
        # TF-format save_weights) save and restore it with the optimizer's rate.
        with self.scope():
            variable = tf.Variable(factor, trainable=False, dtype=tf.float32, name="kscale_rate_factor")
        rebuild.inner_optimizer(optimizer).kscale_rate_factor = variable
        return variable

    def optimizer_for(self, optimizer: Any, learning_rate: Any, options: Any) -> Any:
        if learning_rate is None:
            return optimizer  # nothing to change: keep the user's own optimizer
        return self.clone_optimizer(optimizer, learning_rate, options)

    def clone_optimizer(self, optimizer: Any, learning_rate: Any, options: Any) -> Any:
        return rebuild.clone_optimizer(optimizer, learning_rate)

    def rebuild_in(self, model: Any, owner: Any, weights: list | None = None) -> Any:
        """The same model built in `owner.scope()` (a tf.distribute strategy), with its weights (or
        `weights`)."""
        return rebuild.rebuild_in_scope(model, owner, weights)

    def fresh_compile_args(self, args: dict) -> dict:
        return rebuild.clone_compile_args(args)

    def feed(self, x: Any, y: Any, sample_weight: Any, request: sharding.FeedRequest) -> sharding.Feed:
        return sharding.one_process_feed(tf_data.worker_part(x, y, sample_weight, request), request)

    def user_callbacks(self, callbacks: list) -> list:
        return for_this_worker(callbacks, self.is_chief, self.chief_only_callback_types())
