"""What every backend for Keras 3 models shares: optimizers, learning rates, rebuilding, feeding, callbacks.

Keras 3 runs on JAX, TensorFlow or torch. Nothing here imports TensorFlow (the JAX lane has none),
except to cut a tf.data.Dataset the user passed (TensorFlow is then in the process already).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import weakref
from typing import Any

import keras
import numpy as np

from kscale import _keras_private, sharding
from kscale.backends.base import Backend, results_from_states
from kscale.callbacks import for_this_worker
from kscale.errors import ModelError, OptionError
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
        if getattr(model, "optimizer", None) is None:
            raise ModelError(
                f"model {model.name!r} is not compiled. Call `model.compile(optimizer=..., loss=..., "
                "metrics=...)` before `kscale.distribute(model)`: kscale scales the optimizer's learning rate "
                "and keeps your loss and metrics."
            )

    def rebuild_in(self, model: Any, owner: Any, weights: list | None = None) -> Any:
        """The same model built in `owner.scope()` (a strategy or a keras.distribution), with its weights
        (or `weights`)."""
        weights = [np.asarray(w) for w in (model.get_weights() if weights is None else weights)]
        with owner.scope():
            try:
                clone = _keras_private.clone_uncompiled(keras, model)
            except Exception as err:  # the user's get_config/from_config: anything can go wrong there
                raise ModelError(
                    f"cloning model {model.name!r} with keras.models.clone_model failed ({err}). Fix its "
                    "get_config() so it returns the __init__ arguments, or build the model inside "
                    "`with kscale.scope():` and pass that."
                ) from err
            if not model.built:  # Keras builds it on its first batch, in the scope its fit enters
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
        return clone

    def fresh_compile_args(self, args: dict) -> dict:
        """Compile arguments whose metric and loss objects are new instances (created where they are used)."""

        def fresh(obj: Any) -> Any:
            if isinstance(obj, keras.metrics.Metric | keras.losses.Loss):
                return obj.__class__.from_config(obj.get_config())
            return obj

        return {
            key: keras.tree.map_structure(fresh, value)
            if key in ("loss", "metrics", "weighted_metrics")
            else value
            for key, value in args.items()
        }

    # -- the optimizer and its learning rate -----------------------------------------------------------------
    def is_optimizer(self, value: Any) -> bool:
        return isinstance(value, keras.optimizers.Optimizer)

    def resolve_optimizer(self, optimizer: Any) -> Any:
        return keras.optimizers.get(optimizer)

    def learning_rate_of(self, optimizer: Any) -> Any:
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

    def optimizer_for(self, optimizer: Any, learning_rate: Any, options: Keras3Options) -> Any:
        if learning_rate is None and options.gradient_accumulation_steps == 1:
            return optimizer  # nothing to change: keep the user's own optimizer
        rate = self.learning_rate_of(optimizer) if learning_rate is None else learning_rate
        return self.clone_optimizer(optimizer, rate, options)

    def clone_optimizer(self, optimizer: Any, learning_rate: Any, options: Keras3Options) -> Any:
        """A new optimizer of the same class and settings with `learning_rate` (and the accumulation asked);
        for a LossScaleOptimizer (compile's, under mixed_float16), the same loss scaling around a new inner
        optimizer, which holds the rate."""
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            return keras.optimizers.LossScaleOptimizer(
                self.clone_optimizer(optimizer.inner_optimizer, learning_rate, options),
                initial_scale=optimizer.initial_scale,
                dynamic_growth_steps=optimizer.dynamic_growth_steps,
            )
        config = optimizer.get_config()
        config["learning_rate"] = learning_rate
        if options.gradient_accumulation_steps > 1:
            config["gradient_accumulation_steps"] = options.gradient_accumulation_steps
        return optimizer.__class__.from_config(config)

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
        return sharding.one_process_feed(worker_part(x, y, sample_weight, request), request)

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


def worker_part(x: Any, y: Any, sample_weight: Any, request: sharding.FeedRequest) -> sharding.WorkerPart:
    """This worker's equal part of numpy arrays, a keras.utils.PyDataset or (with TensorFlow) a tf.data.Dataset."""
    if request.every_sample:  # Keras takes this worker's whole batch and spreads it over its devices
        return sharding.every_sample_part(
            x, y, sample_weight, request, EverySamplePyDataset, replicas_per_item=request.replicas_per_worker
        )
    if sharding.is_array_data(x):
        return sharding.array_part(x, y, sample_weight, request)
    if isinstance(x, keras.utils.PyDataset):
        return sharding.batches_part(x, y, sample_weight, request, ShardedPyDataset)
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset):
        from kscale import data

        return data.worker_part(x, y, sample_weight, request)
    return sharding.other_part(x, y, sample_weight, request)


class EverySamplePyDataset(sharding.EverySampleBatches, keras.utils.PyDataset):
    """This worker's padded batches under data_policy='every_sample' (kscale.sharding.EverySampleBatches)."""


class ShardedPyDataset(sharding.BatchShard, keras.utils.PyDataset):
    """A PyDataset restricted to batches r, r+N, ... (kscale.sharding.BatchShard)."""

    noun = "dataset"
    type_name = "a keras.utils.PyDataset"
