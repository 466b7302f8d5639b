"""What every backend for Keras 3 models shares: the Keras 3 family (kscale.keras3: rebuilding, learning rates,
data) and its callbacks.

Keras 3 runs on JAX, TensorFlow or torch. Nothing here imports TensorFlow (the JAX lane has none),
except to cut a tf.data.Dataset the user passed (TensorFlow is then in the process already).
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from typing import Any

import keras
import numpy as np

from kscale import _keras_private, sharding
from kscale.backends.base import Backend, results_from_states
from kscale.callbacks import for_this_worker
from kscale.errors import OptionError
from kscale.keras3 import data, rebuild
from kscale.keras3 import learning_rate as family_rates


@dataclasses.dataclass(frozen=True)
class Keras3Options:
    """`distribute()` options of every Keras 3 backend."""

    #: Update the weights every this many steps with the average gradient (Keras 3 optimizers' own option).
    gradient_accumulation_steps: int = 1

    def __post_init__(self) -> None:
        steps = self.gradient_accumulation_steps
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise OptionError(
                f"gradient_accumulation_steps={steps!r} must be an integer >= 1 (the number of batches whose "
                "gradients are averaged into one update)."
            )


class Keras3Backend(Backend):
    """A backend that trains Keras 3 models; alone, one process with Keras' own device placement."""

    keras_generation = 3
    learning_rates = family_rates.RATES
    Options = Keras3Options

    def __init__(self, env: Any, devices: list[str] | None = None):
        super().__init__(env, devices)
        # `local_copy`'s copies, by model: gone with the model (an id could be reused by another one)
        self._local_copies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @staticmethod
    def keras_module() -> Any:
        return keras

    # -- the model ----------------------------------------------------------------------------------------
    def check_model(self, model: Any) -> None:
        rebuild.check_model(model)

    def rebuild_in(self, model: Any, owner: Any, weights: list | None = None) -> Any:
        return rebuild.rebuild_in(model, owner, weights)

    def fresh_compile_args(self, args: dict) -> dict:
        return rebuild.fresh_compile_args(args)

    # -- the optimizer and its learning rate -----------------------------------------------------------------
    def is_optimizer(self, value: Any) -> bool:
        return isinstance(value, keras.optimizers.Optimizer)

    def resolve_optimizer(self, optimizer: Any) -> Any:
        return keras.optimizers.get(optimizer)

    def learning_rate_of(self, optimizer: Any) -> Any:
        return rebuild.learning_rate_of(optimizer)

    def optimizer_for(self, optimizer: Any, learning_rate: Any, options: Keras3Options) -> Any:
        if learning_rate is None and options.gradient_accumulation_steps == 1:
            return optimizer  # nothing to change: keep the user's own optimizer
        rate = self.learning_rate_of(optimizer) if learning_rate is None else learning_rate
        return self.clone_optimizer(optimizer, rate, options)

    def clone_optimizer(self, optimizer: Any, learning_rate: Any, options: Keras3Options) -> Any:
        return rebuild.clone_optimizer(optimizer, learning_rate, options.gradient_accumulation_steps)

    # -- evaluation on a copy of the model ------------------------------------------------------------------
    def evaluates_on_copy(self) -> bool:
        """Whether evaluate() runs on this process's own copy of the model (see `evaluate`)."""
        return False

    def outside_distribution(self) -> contextlib.AbstractContextManager:
        """Where Keras objects are built and run on this process's devices only."""
        return contextlib.nullcontext()

    def reduced_metric_states(self, variables: list) -> list[np.ndarray]:
        """The metric state `variables` of this process's copy, combined over processes (one process: as is)."""
        return [np.asarray(v.numpy()) for v in variables]

    def averaged_numbers(self, values: list[float]) -> list[float]:
        """Numbers of this process's copy that are no metric's result, averaged over processes."""
        return values

    def evaluate(self, model: Any, keras_evaluate: Any, arguments: dict, compile_args: dict) -> dict:
        """Where Keras' own distributed evaluate loses or miscounts samples (`evaluates_on_copy`), each process
        evaluates its own part, whatever its size, on its own copy of the model (current weights, the
        model's loss and metrics), and the metrics' states are combined over processes: exact, as one
        process evaluating everything. The copy runs outside the distribution: on one device."""
        if not self.evaluates_on_copy():
            return super().evaluate(model, keras_evaluate, arguments, compile_args)
        arguments = _keras_private.without_fit_validation_flag(arguments)
        with self.outside_distribution():
            local = self.local_copy(model, compile_args)
            logs = local.evaluate(**arguments)
            return results_from_states(local, logs, self.reduced_metric_states, self.averaged_numbers)

    def local_copy(self, model: Any, compile_args: dict | None = None) -> Any:
        """A copy of `model` built where this is called (under `outside_distribution`) with `model`'s current
        weights, compiled with `compile_args` (fresh loss and metric objects) when they are given; made
        once per model."""
        local = self._local_copies.get(model)
        weights = [np.asarray(w) for w in model.get_weights()]  # replicated: every process holds them
        if local is None:
            local = _keras_private.clone_uncompiled(keras, model)
            if not local.built:
                local.build_from_config(model.get_build_config())
            self._local_copies[model] = local
        if compile_args is not None and not local.compiled:
            local.compile(**self.fresh_compile_args(compile_args))
        local.set_weights(weights)
        return local

    # -- data and callbacks -------------------------------------------------------------------------------
    def feed(self, x: Any, y: Any, sample_weight: Any, request: sharding.FeedRequest) -> sharding.Feed:
        return sharding.one_process_feed(data.worker_part(x, y, sample_weight, request), request)

    def user_callbacks(self, callbacks: list) -> list:
        callbacks = for_this_worker(callbacks, self.is_chief, self.chief_only_callback_types())
        if self.num_workers == 1:
            return callbacks
        # Keras 3's BackupAndRestore knows one process only: every process restores, the chief writes.
        from kscale.callbacks.shared_backup import SharedBackup

        return [
            SharedBackup(cb, self.is_chief, self.gather, self.barrier)
            if isinstance(cb, keras.callbacks.BackupAndRestore)
            else cb
            for cb in callbacks
        ]


class EvaluatesOnCopy:
    """For Keras 3 under a tf.distribute strategy (before the strategy's class in the bases): Keras 3's
    evaluate there takes equal batches from every replica, losing or miscounting the samples of parts no
    batch divides; evaluation runs on this process's copy of the model (`evaluates_on_copy`), fed this
    worker's part as one process is fed, and the metric states are combined."""

    uneven_evaluation = True

    def feed(self, x: Any, y: Any, sample_weight: Any, request: sharding.FeedRequest) -> sharding.Feed:
        if request.evaluation and self.evaluates_on_copy():
            return Keras3Backend.feed(self, x, y, sample_weight, request)
        return super().feed(x, y, sample_weight, request)
