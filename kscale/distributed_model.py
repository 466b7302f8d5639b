"""`kscale.distribute(model)`: the one line, and what it does to the model.

What comes back is a Keras model of the user's own class: the very object passed in or, where the
backend must create the variables elsewhere (inside a tf.distribute strategy's scope), a copy of it with
the same weights. kscale binds its own `compile`, `fit`, `evaluate`, `predict`, `train_on_batch`,
`test_on_batch`, `predict_on_batch`, `save`, `save_weights` and `load_weights` to that one object
(instance attributes, the way Keras itself sets `model.train_function`). Each does what distribution
changes and calls the class's own method for the rest (kscale/own_methods.py). The class is not changed
and no subclass is made, so every Keras API (serialization, `clone_model`, SavedModel, nesting in another
model, registered custom classes) sees exactly the model it expects. Everything that depends on how
training runs is asked of the backend; the learning rate's life is kscale/rate_life_cycle.py's, what each
worker feeds kscale/data_plan.py's, the plan's notes on the model kscale/plan_notes.py's.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from kscale import (
    _keras_private,
    backends,
    backup_clock,
    compiling,
    data_plan,
    frameworks,
    instance_methods,
    metric_states,
    model_state,
    model_steps,
    own_methods,
    plan_notes,
    preemption,
    seeding,
    step_weights,
)
from kscale.backends.base import Backend
from kscale.callbacks.agreement import agreement_check
from kscale.errors import ModelError
from kscale.options import Options
from kscale.plan import DataPolicy, Plan, divide_epochs
from kscale.rate_life_cycle import RateLifeCycle
from kscale.sharding import split_validation
from kscale.structures import is_array_data


def distribute(model: Any, **options: Any) -> Any:
    """Make a built, compiled Keras model train on every device and worker this process can reach.

    Options (all optional): backend ('single' | 'mirrored' | 'horovod' | 'multi_worker' | 'jax'), devices,
    lr_scaling ('linear' | 'sqrt' | 'none'), warmup_epochs, data_policy ('shard' | 'every_sample' |
    'divide_epochs' | 'none'), batch_semantics ('per_replica' | 'global'), print_plan, check_agreement,
    preemption_notice (a function: True once this worker will be preempted), backup_minutes (fit's
    BackupAndRestore backs up every M minutes of training), and the backend's
    own (horovod: compression, backward_passes_per_step, split_predict, elastic_commit_batches; Keras 3
    backends: gradient_accumulation_steps).

    Returns the model to train: `model` itself, or a copy built where the backend needs the variables
    (a tf.distribute strategy's scope; a keras.distribution for a model built before it), in which case
    `model` is left as it was. Either way an instance of `model`'s own class.
    """
    opts, keywords = Options.parse(options)
    keras = frameworks.keras_of(model)
    if keras is None:
        raise ModelError(
            f"kscale.distribute() takes a Keras model, got {type(model).__module__}.{type(model).__name__}. "
            "Build it with Keras (tf.keras.Sequential(...), keras.Model(...), or a subclass) and compile it."
        )
    devices = list(opts.devices) if opts.devices else None
    backend = backends.current(opts.backend, devices=devices, keras=keras)
    backend_options = backends.parse_options(backend, keywords, Options.names())
    backend.family.check_model(model)
    backend.check_model(model)
    previous = model_state.state_of(model)
    if previous is not None:  # distributed before: start again from what the user gave, not compound
        optimizer, args = previous.optimizer, previous.compile_args
        for name, (users, _) in previous.own_optimizers.items():
            setattr(model, name, users)
    else:
        optimizer = model.optimizer
        args = {k: v for k, v in _keras_private.compile_arguments(model).items() if k != "optimizer"}
    with seeding.users_random_state_kept():
        placed = backend.place_model(model)
    backend.family.prepare_steps(placed)
    model_steps.bind(placed, [backend.around_steps(placed), step_weights.around(backend.loss_replicas)])
    plan = Plan(
        backend=backend.name,
        num_workers=backend.num_workers,
        num_replicas=backend.num_replicas,
        lr_scaling=opts.lr_scaling,
        data_policy=opts.data_policy,
        batch_semantics=opts.batch_semantics,
        devices=backend.devices,
        notes=tuple(backend.notes()),
    )
    model_state.attach(
        placed, model_state.ModelState(backend, opts, backend_options, plan, RateLifeCycle(backend, opts))
    )
    for name, method in _METHODS.items():
        instance_methods.bind(placed, name, method)
    # Compiled by the user's own compile, which kscale cannot call again with what Keras recorded (keras.io's
    # GAN: compile(d_optimizer, g_optimizer, loss_fn); its distiller: compile(optimizer, metrics,
    # student_loss_fn, distillation_loss_fn, alpha, temperature), passing Keras only some of them)
    if own_methods.refuses(placed, "compile", optimizer=None, **args):
        compiling.adopt_own_compile(placed, optimizer)
        return placed
    placed.compile(optimizer=optimizer, **args)  # kscale's compile: scales and wraps the optimizer
    # A loaded checkpoint's momentum, moments and steps
    backend.family.carry_optimizer_state(optimizer, placed, backend.scope())
    return placed


# -- the methods bound to a distributed model ---------------------------------------------------------------


def _fit(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' fit, with `batch_size` per replica, this worker's part of the data and epochs/steps scaled."""
    state = model_state.state(self)
    arguments = own_methods.arguments(self, "fit", args, kwargs)
    fit = functools.partial(_fit_in_this_world, self, arguments)
    return state.backend.run_fit(self, fit, state.backend_options, arguments.get("initial_epoch", 0))


def _fit_in_this_world(
    self: Any, arguments: dict, initial_epoch: int | None = None, callbacks: Sequence[Any] = ()
) -> Any:
    """Plan fit for the world as it is now (its size can change under elastic Horovod) and run it once."""
    state = model_state.state(self)
    backend, opts = state.backend, state.options
    a = dict(arguments)
    if initial_epoch is not None:
        a["initial_epoch"] = initial_epoch
    model_state.replan_world(self)
    x, y, sample_weight = a.get("x"), a.get("y"), a.get("sample_weight")
    backend.build_on_first_batch(self, x)
    epochs, user_steps = a.get("epochs", 1), a.get("steps_per_epoch")
    per_replica = data_plan.per_replica_batch(backend, opts, a.get("batch_size"))
    if opts.data_policy is DataPolicy.DIVIDE_EPOCHS:
        a["epochs"] = divide_epochs(epochs, backend.num_replicas)
    if a.get("validation_split") and a.get("validation_data") is None and is_array_data(x):
        (x, y, sample_weight), a["validation_data"] = split_validation(
            (x, y, sample_weight), a["validation_split"]
        )
        a["validation_split"] = 0.0
    if a.get("class_weight") is not None:  # as sample weights, cut with the samples
        x, y, sample_weight = data_plan.with_class_weight(x, y, sample_weight, a.pop("class_weight"), a)
    shuffle = a.get("shuffle", True)
    asked = data_plan.request(backend, opts, per_replica, shuffle, user_steps, "training data")
    asked = dataclasses.replace(asked, epochs=max(1, a.get("epochs", 1) - a.get("initial_epoch", 0)))
    orders, after_orders = data_plan.epoch_orders(self, backend, asked, shuffle, (x, y, sample_weight))
    asked = dataclasses.replace(asked, orders=orders)
    feed = data_plan.fed(backend, asked, x, y, sample_weight)
    a.update(x=feed.x, y=feed.y, sample_weight=feed.sample_weight, steps_per_epoch=feed.steps)
    data_plan.set_batch_size(a, "batch_size", feed.batch_size)
    if feed.shuffle is not None:  # the feed shuffles itself (alike on every worker)
        a["shuffle"] = feed.shuffle
    if a.get("validation_data") is not None:
        state.validation_whole = data_plan.feed_validation(backend, opts, a, per_replica)
    keras = backend.family.keras_module()
    given = list(a.get("callbacks") or [])
    backups = [cb for cb in given if isinstance(cb, keras.callbacks.BackupAndRestore)]
    backup_clock.timed(backups, opts.backup_minutes)  # before the backup's companions copy its save_freq
    preemption_stop = preemption.stop_for(
        backups, keras.callbacks, backend.gather, backend.is_chief, opts.preemption_notice
    )
    metrics = metric_states.metric_objects(self, keras.metrics.Metric)
    step_weights.weigh_one_number_means(metrics, keras.metrics.Mean)
    notes = (
        *backend.notes(),
        *backend.model_notes(self),
        *feed.notes,
        *plan_notes.notes(backend, self, metrics),
        *preemption.notes(preemption_stop, bool(shuffle) and is_array_data(x)),
        *backup_clock.notes(opts.backup_minutes, backups),
    )
    model_state.set_plan(
        self,
        state.plan.with_fit(
            per_replica_batch=per_replica if is_array_data(x) else None,  # else the data holds the batch
            epochs_before=epochs,
            epochs_after=a.get("epochs", 1),
            steps_per_epoch_before=user_steps,
            steps_per_epoch_after=feed.epoch_steps,
            batches_per_step=feed.batches_per_step,
            notes=notes,
        ),
    )
    model_state.print_plan_once(self)
    state.rates.start_warmup(feed.epoch_steps)
    _quiet_unless_chief(a, backend)
    # The agreement check first: no callback (a checkpoint, say) sees a diverged epoch's weights.
    check = [agreement_check(backend)] if opts.check_agreement and backend.num_workers > 1 else []
    begun: list[int] = []  # the epochs fit begins (EarlyStopping may end it early): one process draws theirs

    def ended(logs: Any) -> None:
        if feed.after_training is not None:
            feed.after_training()
        if after_orders is not None:
            after_orders(len(begun))

    done = [
        keras.callbacks.LambdaCallback(
            on_epoch_begin=lambda epoch, logs: begun.append(epoch), on_train_end=ended
        )
    ]
    declared = bool(metric_states.declared_reductions(metrics))
    # The preemption stop after the user's callbacks: their BackupAndRestore has written the epoch's backup.
    users = backend.callbacks(given, declared)
    preemption.also_at_backups_inside_epochs(preemption_stop, users)
    a["callbacks"] = [*check, *users, *callbacks, *preemption.as_list(preemption_stop), *done]
    with backend.keras_steps(), preemption.listening(preemption_stop):
        try:
            return own_methods.own(self, "fit")(**a)
        except BaseException:
            if feed.after_error is not None:
                feed.after_error()
            raise


def _evaluate(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' evaluate on this worker's part of the data, averaged over workers: the same on every rank."""
    state = model_state.state(self)
    if _keras_private.is_fit_validation(kwargs):  # Keras' own fit validating: its data is already fed
        return state.backend.evaluate(self, own_methods.own(self, "evaluate"), kwargs, state.validation_whole)

    backend = state.backend
    a = own_methods.arguments(self, "evaluate", args, kwargs)
    backend.build_on_first_batch(self, a.get("x"))
    per_replica = data_plan.per_replica_batch(backend, state.options, a.get("batch_size"))
    whole = backend.evaluates_whole(a.get("x"))
    asked = data_plan.request(
        backend, state.options, per_replica, False, a.get("steps"), "evaluation data", True, whole
    )
    feed = data_plan.fed(backend, asked, a.get("x"), a.get("y"), a.get("sample_weight"))
    a.update(x=feed.x, y=feed.y, sample_weight=feed.sample_weight, steps=feed.steps)
    data_plan.set_batch_size(a, "batch_size", feed.batch_size)
    _quiet_unless_chief(a, backend)
    a["callbacks"] = backend.user_callbacks(list(a.get("callbacks") or []))
    return _averaged(self, "evaluate", a, whole)


def _predict(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' predict on all of `x` on every worker (so every rank gets the full result)."""
    state = model_state.state(self)
    a = own_methods.arguments(self, "predict", args, kwargs)
    state.backend.build_on_first_batch(self, a.get("x"))
    if a.get("batch_size") is not None:
        per_replica = data_plan.per_replica_batch(state.backend, state.options, a["batch_size"])
        a["batch_size"] = state.backend.predict_batch_size(per_replica)
    _quiet_unless_chief(a, state.backend)
    if a.get("callbacks"):
        a["callbacks"] = state.backend.user_callbacks(list(a["callbacks"]))
    return state.backend.predict(self, "predict", own_methods.own(self, "predict"), a, state.backend_options)


def _predict_on_batch(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' predict_on_batch on the batch this worker passes, on this worker."""
    a, state = own_methods.arguments(self, "predict_on_batch", args, kwargs), model_state.state(self)
    state.backend.build_on_first_batch(self, a.get("x"))
    keras_method = own_methods.own(self, "predict_on_batch")
    return state.backend.predict(self, "predict_on_batch", keras_method, a, state.backend_options)


def _train_on_batch(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' train_on_batch on the batch this worker passes; the returned numbers are averaged over workers."""
    model_state.print_plan_once(self)
    a = own_methods.arguments(self, "train_on_batch", args, kwargs)
    model_state.state(self).backend.check_batch(data_plan.batch_arrays(a))
    return _averaged(self, "train_on_batch", a)


def _test_on_batch(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' test_on_batch on the batch this worker passes, averaged over workers."""
    a = own_methods.arguments(self, "test_on_batch", args, kwargs)
    model_state.state(self).backend.check_batch(data_plan.batch_arrays(a))
    return _averaged(self, "test_on_batch", a)


def _save(self, filepath: Any, *args: Any, **kwargs: Any) -> None:
    """Keras' save, where the backend says (the chief; all workers where saving is collective), atomically."""
    _saved(self, "save", (filepath, *args), kwargs, may_be_folder=True)


def _save_weights(self, filepath: Any, *args: Any, **kwargs: Any) -> None:
    """Keras' save_weights, where the backend says, atomically (weights are files, never a folder)."""
    _saved(self, "save_weights", (filepath, *args), kwargs, may_be_folder=False)


def _load_weights(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' load_weights (BackupAndRestore's restore too), where the backend needs it to run. The rate
    a file brings is one worker's, as written (every file holds it so): applied scaled for this world."""
    with model_state.state(self).backend.loading():
        return own_methods.own(self, "load_weights")(*args, **kwargs)


_METHODS: dict[str, Callable[..., Any]] = {
    "compile": compiling.compile_method,
    "fit": _fit,
    "evaluate": _evaluate,
    "predict": _predict,
    "train_on_batch": _train_on_batch,
    "test_on_batch": _test_on_batch,
    "predict_on_batch": _predict_on_batch,
    "save": _save,
    "save_weights": _save_weights,
    "load_weights": _load_weights,
}


# -- helpers -------------------------------------------------------------------------------------------------
def _averaged(model: Any, name: str, arguments: dict, whole: bool = False) -> Any:
    """Keras' `name` (evaluate, *_on_batch), its numbers combined over workers, in the form asked for;
    `whole`: evaluate's data is all of it on every process (Backend.evaluates_whole)."""
    return_dict = arguments.get("return_dict", False)
    state = model_state.state(model)
    state.backend.build_on_first_batch(model, arguments.get("x"))
    arguments = {**arguments, "return_dict": True}
    if name == "evaluate":
        logs = combined = state.backend.evaluate(model, own_methods.own(model, name), arguments, whole)
    else:
        with state.backend.keras_steps():
            logs = own_methods.own(model, name)(**arguments)
        combined = state.backend.reduce_results(model, logs)  # the metric states are still there
    if return_dict:
        return combined
    return _keras_private.results_in_keras_order(model, {n: combined[n] for n in logs})


def _saved(model: Any, name: str, args: tuple, kwargs: dict, may_be_folder: bool) -> None:
    """Keras' save or save_weights through the backend (who writes; atomic); overwrite=False is Keras'."""
    a = own_methods.arguments(model, name, args, kwargs)
    target = a.pop("filepath")
    model_state.state(model).backend.save(
        target,
        lambda path: own_methods.own(model, name)(path, **a),
        may_be_folder=may_be_folder,
        replace=a.get("overwrite", True) is not False,
    )


def _quiet_unless_chief(arguments: dict, backend: Backend) -> None:
    """Keras' progress output on the chief only (the others would print the same lines again)."""
    arguments["verbose"] = arguments.get("verbose", "auto") if backend.is_chief else 0
