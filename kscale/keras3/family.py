"""Keras 3 (on JAX or TensorFlow) as every backend trains it: the object a backend holds as its `family`.

Keras 3 runs on JAX, TensorFlow or torch. Nothing here imports TensorFlow (the JAX lane has none), except
to cut a tf.data.Dataset the user passed (TensorFlow is then in the process already). A backend holds this
object and hands itself to the methods that need it; tf.keras's: kscale/keras2/family.py, same methods.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import keras

from kscale import _keras_private, loss_reduction, step_weights
from kscale.errors import BackendError, ModelError, OptionError
from kscale.keras3 import data, learning_rate, rebuild


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


class Keras3Family:
    generation = 3
    #: How the optimizer applies the rate as written times the plan's factor (kscale.learning_rate).
    rates = learning_rate
    #: The iterators of a tf.data dataset Keras' own fit makes in one process (each draws a shuffle's order).
    fit_iterators = _keras_private.KERAS3_FIT_ITERATORS

    @staticmethod
    def keras_module() -> Any:
        return keras

    # -- the model --------------------------------------------------------------------------------------------
    def check_model(self, model: Any) -> None:
        rebuild.check_model(model)

    def rebuild_in(self, model: Any, owner: Any, weights: list | None = None) -> Any:
        return rebuild.rebuild_in(model, owner, weights)

    def fresh_compile_args(self, args: dict, created_here: Any) -> dict:
        return rebuild.fresh_compile_args(args, created_here)

    def first_batch_inputs(self, model: Any, x: Any) -> Any:
        """None: Keras 3 builds a model on its first batch, inside the scope its fit enters."""
        return None

    def prepare_steps(self, model: Any) -> None:
        """Keras' losses reduce as one replica's in the steps kscale runs (kscale.loss_reduction); and Keras
        3 reads a batch itself to build the model before fit's first step: without the gradient weight a
        batch carries (kscale.step_weights)."""
        _keras_private.on_loss_reduction(keras, loss_reduction.scaled_sum, loss_reduction.check)
        _keras_private.symbolic_build_without(model, step_weights.batch_of)

    # -- what Keras 3 cannot do under a tf.distribute strategy: stopped before training, saying what works --
    def check_strategy_model(self, model: Any, backend_name: str) -> None:
        """Keras 3's TensorFlow trainer builds a model under a strategy that it does not find built by
        calling it on the first batch ("Unable to automatically build the model"), which a model without
        call() (keras.io's GAN and VAE, whose train_step calls their sub-models) cannot take; one process
        never does that build. Such a model whose sub-models are built is told so (`strategy_placed`)."""
        if _has_no_call(model) and not _sub_models_built(model):
            raise ModelError(
                f"{type(model).__name__} has no call(), and Keras 3's TensorFlow trainer builds every model "
                f"it trains under a tf.distribute strategy (the {backend_name} backend) by calling it, a limit "
                f"of Keras itself. Build the models {type(model).__name__} holds before kscale.distribute() "
                "(give each a keras.Input, or call it on a batch), or give the model a call()."
            )

    def strategy_steps(self) -> Any:
        """Where Keras 3's fit and *_on_batch run under a tf.distribute strategy: with kscale's corrections
        of its TensorFlow trainer (_keras_private.keras3_strategy_fixed)."""
        return _keras_private.keras3_strategy_fixed()

    def strategy_loading(self) -> Any:
        """Where Keras 3's load_weights runs under a tf.distribute strategy: as it is."""
        return contextlib.nullcontext()

    def strategy_made(self, backend_name: str) -> None:
        """Nothing: Keras 3 trains a stateful RNN under a tf.distribute strategy."""

    def strategy_left(self, strategy: Any, model: Any) -> None:
        """Nothing: Keras 3's compile takes metrics made outside the model's strategy."""

    def adopt_into_strategy(self, model: Any, strategy: Any) -> bool:
        """Whether `model`, built outside `strategy`, has every weight in it, and now trains in it itself:
        keras.io's Distiller made after its teacher trained holds no weight of its own, only its student
        and teacher, built in the strategy (after `import kscale`, or distributed before)."""
        variables = [v.value for v in model.variables]
        if not variables or not all(strategy.extended.variable_created_in_scope(v) for v in variables):
            return False
        _keras_private.set_keras3_model_strategy(model, strategy)
        return True

    def strategy_placed(self, model: Any) -> None:
        """A model without call() whose sub-models are built holds every variable it trains: it is built,
        and says so (Keras' public `built`), so that Keras' trainer does not try to build it by calling it.
        A synchronized BatchNormalization's statistics weigh each replica's gradient by its share of a
        step shared unevenly (step_weights.weighed_sum); the losses layers add are each replica thread's
        own (_keras_private.losses_per_thread)."""
        if _has_no_call(model) and _sub_models_built(model):
            model.built = True
        _keras_private.weigh_synchronized_moments(
            step_weights.weighed_sum()
        )  # once; only such layers call it
        _keras_private.losses_per_thread(keras)  # the replicas' threads add losses to their own lists

    def strategy_model_notes(self, model: Any) -> list[str]:
        """A model of several losses: Keras 3 on TensorFlow, in one process, weighs each output's own loss
        of a batch whose size its retraced step does not know (a short last batch) as one sample; under a
        strategy kscale weighs every batch by its rows (_keras_private.keras3_strategy_fixed)."""
        loss = _keras_private.compile_arguments(model).get("loss")
        if isinstance(loss, dict | list | tuple) and len(loss) > 1:
            return [
                "each output's own loss (History, evaluate) is its mean over every sample; Keras 3 on "
                "TensorFlow alone weighs a short last batch's as one sample"
            ]
        return []

    def check_strategy_compile(
        self, args: dict, optimizer: Any, options: Any, backend_name: str, replicas: int
    ) -> None:
        """Keras 3's TensorFlow trainer fails under a strategy with steps_per_execution > 1 (deep in its
        symbolic step: "You must feed a value for placeholder tensor"; Keras 3.15.1, without kscale too), and
        with an optimizer that accumulates gradients (its update is applied inside a `Cond`, where the
        strategy cannot merge the replicas' updates: "`merge_call` called while defining a new graph")."""
        if replicas < 2:
            return
        steps = args.get("steps_per_execution") or 1
        if isinstance(steps, int) and steps > 1:
            raise BackendError(
                f"compile(steps_per_execution={steps}) fails in Keras 3's TensorFlow trainer under a "
                f"tf.distribute strategy (the {backend_name} backend), a bug of Keras itself. Compile with "
                "steps_per_execution=1 (the default) here, or train with Keras 3 on JAX (KERAS_BACKEND=jax, "
                "`kscale run --engine jax`), where it works."
            )
        accumulation = max(_accumulation_steps(optimizer), options.gradient_accumulation_steps)
        if accumulation > 1:
            raise BackendError(
                f"gradient_accumulation_steps={accumulation} (the optimizer's, or kscale's option) fails in "
                f"Keras 3's TensorFlow trainer under a tf.distribute strategy (the {backend_name} backend): "
                "the optimizer applies the accumulated gradients inside a conditional, where the strategy "
                "cannot combine the replicas' updates, a bug of Keras itself (plain Keras with "
                "MirroredStrategy fails the same way). Train without gradient accumulation here, or train "
                "with Keras 3 on JAX (KERAS_BACKEND=jax, `kscale run --engine jax`) or on PyTorch "
                "(KERAS_BACKEND=torch, `kscale run --engine torch`), where it trains as one process."
            )

    # -- the optimizer and its learning rate -------------------------------------------------------------------
    def is_optimizer(self, value: Any) -> bool:
        return isinstance(value, keras.optimizers.Optimizer)

    def resolve_optimizer(self, optimizer: Any) -> Any:
        return keras.optimizers.get(optimizer)

    def learning_rate_of(self, optimizer: Any) -> Any:
        return rebuild.learning_rate_of(optimizer)

    def optimizer_for(self, optimizer: Any, options: Keras3Options) -> Any:
        """The user's own optimizer (a copy where kscale's gradient accumulation is asked), applying its
        rate scaled (before a backend wraps it)."""
        if options.gradient_accumulation_steps > 1:
            optimizer = self.clone_optimizer(optimizer, options)
        return learning_rate.with_scaled_class(optimizer)

    def clone_optimizer(self, optimizer: Any, options: Keras3Options) -> Any:
        """A new optimizer of the same class and settings (created where a strategy needs its variables)."""
        rate = rebuild.learning_rate_of(optimizer)
        return rebuild.clone_optimizer(optimizer, rate, options.gradient_accumulation_steps)

    def allow_own_losses(self, model: Any) -> None:
        """Nothing: Keras 3's losses take their default reduction under a strategy."""

    def carry_optimizer_state(self, old_optimizer: Any, model: Any, scope: Any) -> None:
        """A loaded checkpoint's momentum, moments and steps, into model.optimizer, made in `scope`."""
        rebuild.carry_optimizer_state(old_optimizer, model.optimizer, model, scope)

    def epoch_orders(self, model: Any, count: int, batch_size: int, epochs: int, shuffle: Any) -> Any:
        """The order of `count` array samples in each epoch of one process's fit of `model` (an epochs ×
        count array), drawn as Keras draws it, and what to call when fit ends, with the epochs it began (or
        None) (_keras_private.array_orders)."""
        return _keras_private.array_orders(
            keras, count, batch_size, epochs, shuffle, _keras_private.fits_after_a_peek(model)
        )

    def batch_orders(self, model: Any, count: int, epochs: int) -> Any:
        """The order of the `count` batches of a Sequence / PyDataset in each epoch of one process's fit of
        `model` with shuffle=True (an epochs × count array), drawn as Keras draws it, and what to call when
        fit ends, with the epochs it began."""
        return _keras_private.batch_orders(keras, count, epochs, _keras_private.fits_after_a_peek(model))

    # -- data and callbacks -------------------------------------------------------------------------------------
    def worker_part(self, x: Any, y: Any, sample_weight: Any, request: Any) -> Any:
        return data.worker_part(x, y, sample_weight, request)

    def collectively_saving_callbacks(self) -> tuple[type, ...]:
        """None: Keras 3's callbacks save from the chief alone."""
        return ()

    def backup_to_share(self) -> type | None:
        """Keras 3's BackupAndRestore knows one process only: every process restores, the chief writes
        (kscale.callbacks.shared_backup)."""
        return keras.callbacks.BackupAndRestore

    def backup_companions(self, callback: Any, backend: Any) -> list:
        """Nothing: kscale's shared backup itself resumes a Keras 3 backup written inside an epoch at the
        batch after it (kscale/callbacks/shared_backup.py)."""
        return []


def _accumulation_steps(optimizer: Any) -> int:
    """The steps `optimizer` (or the one a LossScaleOptimizer holds) accumulates gradients over; 1 for none."""
    inner = getattr(optimizer, "inner_optimizer", None)
    own = getattr(optimizer, "gradient_accumulation_steps", None) or 1
    return max(own, _accumulation_steps(inner) if inner is not None else 1)


def _has_no_call(model: Any) -> bool:
    return type(model).call is keras.Model.call


def _sub_models_built(model: Any) -> bool:
    """Whether `model` holds layers, every one of them built (its variables created)."""
    return bool(model.layers) and all(layer.built for layer in model.layers)
