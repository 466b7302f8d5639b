"""`kscale.distribute(model)`: the one line, and what it does to the model.

What comes back is a Keras model of the user's own class: the very object passed in or, where the
backend must create the variables elsewhere (inside a tf.distribute strategy's scope), a copy of it with
the same weights. kscale binds its own `compile`, `fit`, `evaluate`, `predict`, `train_on_batch`,
`test_on_batch`, `predict_on_batch`, `save` and `save_weights` to that one object (instance attributes, the way Keras itself
sets `model.train_function`). Each does what distribution changes and calls the class's own method for
the rest. The class is not changed and no subclass is made, so every Keras API (serialization,
`clone_model`, SavedModel, nesting in another model, registered custom classes) sees exactly the model
it expects. Everything that depends on how training runs is asked of the backend.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kscale import (
    _keras_private,
    agreement,
    backends,
    frameworks,
    log,
    loss_reduction,
    metric_states,
    rebuild,
    seeding,
    step_weights,
)
from kscale.backends.base import Backend
from kscale.callbacks.agreement import agreement_check
from kscale.errors import DataError, ModelError, OptionError
from kscale.learning_rate import describe
from kscale.options import Options
from kscale.plan import BatchSemantics, DataPolicy, Plan, divide_epochs, divide_steps, lr_scale_factor
from kscale.sharding import (
    Feed,
    FeedRequest,
    Shard,
    class_weighted,
    flatten,
    is_array_data,
    num_samples,
    split_validation,
)

_KERAS_DEFAULT_BATCH = 32
_STATE = "_kscale_state"


@dataclasses.dataclass
class _State:
    """What kscale keeps on a distributed model (one attribute, never tracked by Keras)."""

    backend: Backend
    options: Options
    backend_options: Any
    plan: Plan
    optimizer: Any = None  # the optimizer as the user gave it (before the backend wrapped it)
    compile_args: dict = dataclasses.field(default_factory=dict)
    #: how model.optimizer applies the rate as written (kscale.learning_rate), or None (nothing to scale)
    scaling: Any = None
    warmup: bool = False
    plan_printed: bool = False
    #: model.optimizer is kscale's (compiled through Keras' compile), not a placeholder of the user's own
    #: compile (a GAN's compile(d_optimizer, g_optimizer, loss_fn) leaves Keras' default there)
    scales_model_optimizer: bool = True
    #: optimizers held as attributes besides model.optimizer: name -> (the user's, kscale's)
    own_optimizers: dict = dataclasses.field(default_factory=dict)
    #: fit's validation data is evaluated whole on every process (Backend.evaluates_whole)
    validation_whole: bool = False


def distribute(model: Any, **options: Any) -> Any:
    """Make a built, compiled Keras model train on every device and worker this process can reach.

    Options (all optional): backend ('single' | 'mirrored' | 'horovod' | 'multi_worker' | 'jax'), devices,
    lr_scaling ('linear' | 'sqrt' | 'none'), warmup_epochs, data_policy ('shard' | 'every_sample' |
    'divide_epochs' | 'none'), batch_semantics ('per_replica' | 'global'), print_plan, and the backend's
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
    backend.check_model(model)
    previous = state_of(model)
    if previous is not None:  # distributed before: start again from what the user gave, not compound
        optimizer, args = previous.optimizer, previous.compile_args
        for name, (users, _) in previous.own_optimizers.items():
            setattr(model, name, users)
    else:
        optimizer = model.optimizer
        args = {k: v for k, v in _keras_private.compile_arguments(model).items() if k != "optimizer"}
    with seeding.users_random_state_kept():
        placed = backend.place_model(model)
    backend.family.watch_step_weights(placed, backend.loss_replicas)
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
    object.__setattr__(placed, _STATE, _State(backend, opts, backend_options, plan))
    for name, method in _METHODS.items():
        object.__setattr__(placed, name, types.MethodType(method, placed))
    if _compile_refuses(placed, args):  # compiled by the user's own compile, which kscale cannot call again
        _adopt_own_compile(placed, optimizer)
        return placed
    placed.compile(optimizer=optimizer, **args)  # kscale's compile: scales and wraps the optimizer
    # A loaded checkpoint's momentum, moments and steps
    backend.family.carry_optimizer_state(backend, optimizer, placed)
    return placed


def _compile_takes_optimizer(model: Any) -> bool:
    """False for a class whose own compile takes none (keras.io's GAN: two optimizers of its own)."""
    return "optimizer" in inspect.signature(type(model).compile).parameters


def _compile_refuses(model: Any, args: dict) -> bool:
    """The model's compile cannot be called again with the arguments Keras recorded: the class's own
    compile takes other ones (keras.io's GAN: two optimizers and a loss function; its knowledge
    distillation: compile(optimizer, metrics, student_loss_fn, distillation_loss_fn, alpha, temperature),
    which calls Keras' compile with only some of them)."""
    try:
        inspect.signature(type(model).compile).bind(model, optimizer=None, **args)
    except TypeError:
        return True
    return False


def _adopt_own_compile(model: Any, optimizer: Any) -> None:
    """After the user's own compile: every optimizer the model holds gets its rate scaled and the backend's
    form. model.optimizer is one of them where the class's compile takes an optimizer (and hands it to
    Keras' compile, which trains with it); otherwise it is Keras' unused default."""
    state = _state(model)
    if _compile_takes_optimizer(model):
        # Keras' own compile again, with what the class's compile gave it (the optimizer, metrics): the
        # attributes the class's compile set (a Distiller's loss functions) stay, and the backend gets
        # what it needs of the rest (the metrics made anew in a strategy's scope).
        keras_compile = functools.partial(state.backend.keras_module().Model.compile, model)
        args = {k: v for k, v in _keras_private.compile_arguments(model).items() if k != "optimizer"}
        _compile_optimizer(model, keras_compile, optimizer, args)
        state.backend.family.carry_optimizer_state(state.backend, optimizer, model)
    else:
        state.scales_model_optimizer = False
    state.backend.family.allow_own_losses(model)
    _prepare_own_optimizers(model)


def _prepare_own_optimizers(model: Any) -> None:
    """Every optimizer the model holds as an attribute besides model.optimizer (a GAN's, set in its own
    compile or in __init__) gets what model.optimizer gets: its rate scaled, and the backend's form of it
    (averaging over workers; created in the strategy's scope). The plan lists each."""
    state = _state(model)
    backend = state.backend
    rates = backend.family.rates
    listed = []
    for name, value in list(vars(model).items()):
        if name.startswith("_") or name == "optimizer" or not backend.family.is_optimizer(value):
            continue
        known = state.own_optimizers.get(name)
        if known is None or value is not known[1]:  # the user's, new to kscale
            with backend.scope():
                prepared = backend.optimizer_for(value, state.backend_options)
            rates.attach_scaling(prepared, _scaling(state))
            setattr(model, name, prepared)
            known = state.own_optimizers[name] = (value, prepared)
        rate = backend.family.learning_rate_of(known[0])
        listed.append((name, describe(rate, rates.SCHEDULE), _applied(state, rate)))
    _set_plan(model, dataclasses.replace(state.plan, own_optimizers=tuple(listed)))


def _scaling(state: _State) -> Any:
    """The model's RateScaling (kscale.learning_rate), made on first use: every optimizer it trains with
    applies its rate with it."""
    if state.scaling is None:
        factor = lr_scale_factor(state.options.lr_scaling, state.backend.num_replicas)
        state.warmup = state.options.warmup_epochs > 0 and factor != 1.0
        state.scaling = state.backend.family.rates.rate_scaling(factor, state.warmup)
    return state.scaling


def _applied(state: _State, rate: Any) -> float | str:
    """The rate an update applies, for the plan."""
    schedule = state.backend.family.rates.SCHEDULE
    return describe(rate, schedule) if state.scaling is None else state.scaling.describe(rate, schedule)


def state_of(model: Any) -> _State | None:
    """kscale's state on a distributed model, or None for any other object."""
    return vars(model).get(_STATE) if hasattr(model, "__dict__") else None


def _state(model: Any) -> _State:
    return vars(model)[_STATE]


def _set_plan(model: Any, plan: Plan) -> None:
    _state(model).plan = plan
    object.__setattr__(model, "kscale_plan", plan)


def _keras(model: Any, name: str) -> Callable[..., Any]:
    """The method `name` of the model's own class (Keras', or the user's override), bound to the model.

    An override of the user's may not take every argument kscale passes (its part of the data, its
    callbacks, steps): dropping one would train wrong, so that is a ModelError saying how to fix it."""
    method = getattr(type(model), name)

    def call(*args: Any, **kwargs: Any) -> Any:
        taken, takes_any = _keywords(method)
        refused = sorted(set(kwargs) - taken) if not takes_any else []
        if refused:
            raise ModelError(
                f"{type(model).__name__}.{name}() (your override) takes no {', '.join(refused)}, which kscale "
                f"passes to it (each worker's part of the data, its callbacks and step counts). Give it "
                f"**kwargs and pass them on: `def {name}(self, *args, **kwargs): ... super().{name}(*args, "
                "**kwargs)`."
            )
        return method(model, *args, **kwargs)

    return call


@functools.cache
def _keras_method(cls: type, name: str) -> Callable[..., Any]:
    """Keras' own `name` among `cls`'s bases (the class's own where no Keras class defines it)."""
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in ("keras", "tf_keras") and name in vars(klass):
            return vars(klass)[name]
    return getattr(cls, name)


@functools.cache
def _keywords(method: Callable[..., Any]) -> tuple[frozenset[str], bool]:
    """The keyword arguments `method` takes, and whether it takes any (**kwargs)."""
    parameters = inspect.signature(method).parameters.values()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    return frozenset(p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL), takes_any


def _arguments(model: Any, name: str, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by name, as the class's own method would receive them (positional ones too);
    by Keras' own signature where the class's takes `*args` (an override passing everything on)."""
    signature = inspect.signature(getattr(type(model), name))
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values()):
        signature = inspect.signature(_keras_method(type(model), name))
    bound = signature.bind(model, *args, **kwargs).arguments
    named: dict[str, Any] = {}
    for parameter in list(signature.parameters.values())[1:]:
        if parameter.name not in bound:
            continue
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            named.update(bound[parameter.name])
        else:
            named[parameter.name] = bound[parameter.name]
    return named


# -- the methods bound to a distributed model ---------------------------------------------------------------
def _compile(self, *args: Any, **kwargs: Any) -> None:
    """Keras' compile, with the learning rate scaled for the replicas and the optimizer the backend needs."""
    backend = _state(self).backend
    if not _compile_takes_optimizer(self):  # the user's compile (a GAN's), in the backend's scope
        with backend.scope():
            _keras(self, "compile")(*args, **kwargs)
    else:
        arguments = _arguments(self, "compile", args, kwargs)
        optimizer = arguments.pop("optimizer", "rmsprop")
        _compile_optimizer(self, _keras(self, "compile"), optimizer, arguments)
    backend.family.allow_own_losses(self)  # whatever compile set (a Distiller's student_loss_fn)
    _prepare_own_optimizers(self)


def _compile_optimizer(model: Any, compile_fn: Callable[..., None], optimizer: Any, arguments: dict) -> None:
    """Compile through `compile_fn` with `optimizer` in the backend's form, applying the rate the script
    writes (now or later: callbacks, `optimizer.learning_rate = x`) times the plan's factor."""
    state = _state(model)
    backend, opts = state.backend, state.options
    rates = backend.family.rates
    optimizer = backend.family.resolve_optimizer(optimizer)
    rate = backend.family.learning_rate_of(optimizer)
    if backend.loss_replicas > 1:
        loss_reduction.check_compiled(flatten(arguments.get("loss")), (None, "none"))
    backend.compile(compile_fn, optimizer, arguments, state.backend_options)
    state.optimizer, state.compile_args = optimizer, arguments
    rates.attach_scaling(model.optimizer, _scaling(state))
    _set_plan(
        model,
        dataclasses.replace(
            state.plan,
            learning_rate_before=describe(rate, rates.SCHEDULE),
            learning_rate_after=_applied(state, rate),
            warmup_epochs=float(opts.warmup_epochs) if state.warmup else 0.0,
        ),
    )


def _fit(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' fit, with `batch_size` per replica, this worker's part of the data and epochs/steps scaled."""
    state = _state(self)
    arguments = _arguments(self, "fit", args, kwargs)
    fit = functools.partial(_fit_in_this_world, self, arguments)
    return state.backend.run_fit(self, fit, state.backend_options, arguments.get("initial_epoch", 0))


def _fit_in_this_world(
    self: Any, arguments: dict, initial_epoch: int | None = None, callbacks: Sequence[Any] = ()
) -> Any:
    """Plan fit for the world as it is now (its size can change under elastic Horovod) and run it once."""
    state = _state(self)
    backend, opts = state.backend, state.options
    a = dict(arguments)
    if initial_epoch is not None:
        a["initial_epoch"] = initial_epoch
    _replan_world(self)
    x, y, sample_weight = a.get("x"), a.get("y"), a.get("sample_weight")
    backend.family.build_on_first_batch(backend, self, x)
    epochs, user_steps = a.get("epochs", 1), a.get("steps_per_epoch")
    per_replica = _per_replica_batch(state, a.get("batch_size"))
    if opts.data_policy is DataPolicy.DIVIDE_EPOCHS:
        a["epochs"] = divide_epochs(epochs, backend.num_replicas)
    if a.get("validation_split") and a.get("validation_data") is None and is_array_data(x):
        (x, y, sample_weight), a["validation_data"] = split_validation(
            (x, y, sample_weight), a["validation_split"]
        )
        a["validation_split"] = 0.0
    if a.get("class_weight") is not None:  # as sample weights, cut with the samples
        x, y, sample_weight = _with_class_weight(x, y, sample_weight, a.pop("class_weight"), a)
    request = _request(state, per_replica, a.get("shuffle", True), user_steps, "training data")
    request = dataclasses.replace(request, epochs=max(1, a.get("epochs", 1) - a.get("initial_epoch", 0)))
    orders, after_orders = _epoch_orders(self, state, request, a.get("shuffle", True), (x, y, sample_weight))
    request = dataclasses.replace(request, orders=orders)
    _check_same_data(backend, request, x, y, sample_weight)
    feed = backend.feed(x, y, sample_weight, request)
    _check_same_feed(backend, request, feed)
    a.update(x=feed.x, y=feed.y, sample_weight=feed.sample_weight, steps_per_epoch=feed.steps)
    _set_batch_size(a, "batch_size", feed.batch_size)
    if feed.shuffle is not None:  # the feed shuffles itself (alike on every worker)
        a["shuffle"] = feed.shuffle
    if a.get("validation_data") is not None:
        vx, vy, vsw = _unpack_validation(a["validation_data"])
        given = a.get("validation_batch_size")
        val_batch = _per_replica_batch(state, given) if given else per_replica
        state.validation_whole = backend.evaluates_whole(vx)
        val_request = _request(
            state,
            val_batch,
            False,
            a.get("validation_steps"),
            "validation data",
            True,
            state.validation_whole,
        )
        _check_same_data(backend, val_request, vx, vy, vsw)
        val = backend.feed(vx, vy, vsw, val_request)
        _check_same_feed(backend, val_request, val)
        parts = tuple(v for v in (val.x, val.y, val.sample_weight) if v is not None)
        a["validation_data"] = parts[0] if len(parts) == 1 else parts
        a["validation_steps"] = val.steps
        _set_batch_size(a, "validation_batch_size", val.batch_size)
    metrics = _metric_objects(self)
    step_weights.weigh_one_number_means(metrics, backend.keras_module().metrics.Mean)
    _set_plan(
        self,
        state.plan.with_fit(
            per_replica_batch=per_replica if is_array_data(x) else None,  # else the data holds the batch
            epochs_before=epochs,
            epochs_after=a.get("epochs", 1),
            steps_per_epoch_before=user_steps,
            steps_per_epoch_after=feed.epoch_steps,
            notes=(
                *backend.notes(),
                *backend.model_notes(self),
                *feed.notes,
                *_metric_notes(state, metrics),
                *_loss_scale_notes(state, self),
                *_batch_norm_notes(state, self),
            ),
        ),
    )
    _print_plan_once(self)
    _set_warmup(state, feed.epoch_steps)
    _quiet_unless_chief(a, backend)
    # The agreement check first: no callback (a checkpoint, say) sees a diverged epoch's weights.
    check = [agreement_check(backend)] if opts.check_agreement and backend.num_workers > 1 else []
    endings = [end for end in (feed.after_training, after_orders) if end is not None]
    done = [
        backend.keras_module().callbacks.LambdaCallback(on_train_end=lambda logs: [end() for end in endings])
    ]
    declared = bool(metric_states.declared_reductions(metrics))
    a["callbacks"] = [*check, *backend.callbacks(list(a.get("callbacks") or []), declared), *callbacks, *done]
    with backend.keras_steps():
        try:
            return _keras(self, "fit")(**a)
        except BaseException:
            if feed.after_error is not None:
                feed.after_error()
            raise


def _metric_objects(model: Any) -> list:
    """The metric objects the model computes: compile's (its own before the first step builds them), the
    model's, and those it holds as attributes (a train_step's own trackers)."""
    keras_metric = _state(model).backend.keras_module().metrics.Metric
    compiled = _keras_private.compile_arguments(model)
    given = flatten([compiled.get("metrics"), compiled.get("weighted_metrics")])
    held = list(vars(model).values())
    found = [m for m in [*given, *model.metrics, *held] if isinstance(m, keras_metric)]
    return list({id(m): m for m in found}.values())


_WARNED_METRIC_CLASSES: set[str] = set()


def _metric_notes(state: _State, metrics: list) -> list[str]:
    """What the plan says of metrics of the user's own classes that declare nothing: kscale sums their
    states over replicas (right for totals and counts). Warned once per class."""
    backend = state.backend
    if backend.loss_replicas < 2:  # one replica, or every step's metrics are the global batch's (JAX)
        return []
    undeclared = metric_states.user_metrics_declaring_nothing(metrics)
    if not undeclared:
        return []
    note = (
        f"metric(s) {', '.join(undeclared)}: their states are summed over the replicas (right for totals and "
        "counts); declare others with kscale.combine_states (a maximum: combine_states(state='max'))"
    )
    new = [name for name in undeclared if name not in _WARNED_METRIC_CLASSES]
    if new and backend.is_chief:
        _WARNED_METRIC_CLASSES.update(new)
        log.warning(note)
    return [note]


def _loss_scale_notes(state: _State, model: Any) -> list[str]:
    """What the plan says of a mixed-precision loss scale over replicas (kscale/keras2/loss_scaling.py):
    each replica's float16 backward pass carries one process's numbers, but a sum over the whole global
    batch (a kernel's gradient) is only made in float32, after the replicas' halves are summed."""
    if state.backend.loss_replicas < 2 or not hasattr(getattr(model, "optimizer", None), "inner_optimizer"):
        return []
    return [
        "loss scaling (mixed_float16): each replica's float16 gradients are one process's, so the same steps "
        "overflow and are skipped; one whose float16 sum over the global batch alone overflows (no replica's "
        "part does) is applied, where one process skips it"
    ]


def _batch_norm_notes(state: _State, model: Any) -> list[str]:
    """What the plan says of BatchNormalization layers that are not synchronized, where each replica
    computes a step on its slice: each normalizes by its slice's statistics, not the global batch's. Also
    where the user asked for synchronized=True: tf.keras 2.15 saves no such setting, so a model loaded from
    a file has lost it (generated program 84 of lane A: 0.02 off after load_model, history exact)."""
    if state.backend.loss_replicas < 2:
        return []
    batch_norm = state.backend.keras_module().layers.BatchNormalization
    found = [
        layer.name
        for layer in rebuild.submodules(model)
        if isinstance(layer, batch_norm) and not getattr(layer, "synchronized", False)
    ]
    if not found:
        return []
    return [
        f"BatchNormalization {', '.join(sorted(found))}: not synchronized, each replica normalizes by its own "
        "slice's statistics (one process: the global batch's); BatchNormalization(synchronized=True) for those "
        "(a tf.keras model loaded from a file has lost that setting: set it again before distribute())"
    ]


def _epoch_orders(
    model: Any, state: _State, request: FeedRequest, shuffle: Any, arrays: tuple
) -> tuple[np.ndarray | None, Callable[[], None] | None]:
    """Shuffled training arrays, cut among replicas: the order of the samples in each epoch, as one
    process's fit draws it. Every worker draws them through Keras' own array adapter, from the random state
    Keras draws from (so that the seeded script's orders are one process's, and every worker's random
    stream goes on as there: Keras 3 seeds each initializer from Python's `random`, and on JAX a model
    built later, load_model's too, must start alike everywhere), and the chief's draw is the one every
    worker uses (one broadcast per fit: an unseeded script's workers draw others). None
    where Keras' own shuffle serves (one replica), or no order is drawn per epoch (steps_per_epoch given:
    Keras goes on with one order across epochs). With them, what to do when fit ends (or None): put the
    random state back as one process's fit leaves it (_keras_private.array_orders)."""
    backend = state.backend
    x = arrays[0]
    if not shuffle or request.steps is not None or backend.num_replicas < 2:
        return None, None
    if request.shard.count * request.replicas_per_worker < 2:  # every worker takes all of it
        return None, None
    if isinstance(x, backend.keras_module().utils.Sequence):  # a PyDataset: the order of its batches
        count = math.ceil(len(x) / backend.num_replicas)  # one process's, at the global batch
        drawn = backend.family.batch_orders(model, count, request.epochs)
        return backend.broadcast(np.asarray(drawn, np.int64)), None
    if not is_array_data(x):
        return None, None
    count = num_samples(*[a for a in arrays if a is not None])
    global_batch = request.per_replica * backend.num_replicas
    drawn, after = backend.family.epoch_orders(model, count, global_batch, request.epochs, shuffle)
    return backend.broadcast(np.asarray(drawn, np.int64)), after


def _with_class_weight(x: Any, y: Any, sample_weight: Any, class_weight: dict, arguments: dict) -> tuple:
    """Keras' class_weight turned into sample weights before kscale cuts the data (arrays, tf.data), as
    Keras itself turns it; other data keeps it for Keras."""
    if is_array_data(x) and y is not None:
        return x, y, class_weighted(y, sample_weight, class_weight)
    if type(x).__module__.startswith("tensorflow"):  # a tf.data.Dataset: TensorFlow is imported already
        from kscale import tf_data

        return tf_data.with_class_weight(x, class_weight), y, sample_weight
    arguments["class_weight"] = class_weight
    return x, y, sample_weight


def _replan_world(model: Any) -> None:
    """The world's size as it is now (elastic Horovod changes it), and the rate factor for it."""
    state = _state(model)
    backend = state.backend
    if (backend.num_workers, backend.num_replicas) == (state.plan.num_workers, state.plan.num_replicas):
        return
    if state.scaling is not None:
        state.scaling.factor = lr_scale_factor(state.options.lr_scaling, backend.num_replicas)
        # The traced step holds the factor it was traced with (a constant, as the rate's other inputs)
        if getattr(model, "train_function", None) is not None:
            model.make_train_function(force=True)
    after = (
        _applied(state, backend.family.learning_rate_of(model.optimizer))
        if state.scales_model_optimizer
        else None
    )
    _set_plan(
        model,
        dataclasses.replace(
            state.plan,
            num_workers=backend.num_workers,
            num_replicas=backend.num_replicas,
            learning_rate_after=after,
        ),
    )
    state.plan_printed = False  # a new world: say what it does


def _evaluate(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' evaluate on this worker's part of the data, averaged over workers: the same on every rank."""
    state = _state(self)
    if _keras_private.is_fit_validation(kwargs):  # Keras' own fit validating: its data is already fed
        return state.backend.evaluate(self, _keras(self, "evaluate"), kwargs, state.validation_whole)

    backend = state.backend
    a = _arguments(self, "evaluate", args, kwargs)
    backend.family.build_on_first_batch(backend, self, a.get("x"))
    per_replica = _per_replica_batch(state, a.get("batch_size"))
    whole = backend.evaluates_whole(a.get("x"))
    request = _request(state, per_replica, False, a.get("steps"), "evaluation data", True, whole)
    _check_same_data(backend, request, a.get("x"), a.get("y"), a.get("sample_weight"))
    feed = backend.feed(a.get("x"), a.get("y"), a.get("sample_weight"), request)
    _check_same_feed(backend, request, feed)
    a.update(x=feed.x, y=feed.y, sample_weight=feed.sample_weight, steps=feed.steps)
    _set_batch_size(a, "batch_size", feed.batch_size)
    _quiet_unless_chief(a, backend)
    a["callbacks"] = backend.user_callbacks(list(a.get("callbacks") or []))
    return _averaged(self, "evaluate", a, whole)


def _predict(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' predict on all of `x` on every worker (so every rank gets the full result)."""
    state = _state(self)
    a = _arguments(self, "predict", args, kwargs)
    state.backend.family.build_on_first_batch(state.backend, self, a.get("x"))
    if a.get("batch_size") is not None:
        a["batch_size"] = state.backend.predict_batch_size(_per_replica_batch(state, a["batch_size"]))
    _quiet_unless_chief(a, state.backend)
    if a.get("callbacks"):
        a["callbacks"] = state.backend.user_callbacks(list(a["callbacks"]))
    return state.backend.predict(self, "predict", _keras(self, "predict"), a, state.backend_options)


def _predict_on_batch(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' predict_on_batch on the batch this worker passes, on this worker."""
    a, state = _arguments(self, "predict_on_batch", args, kwargs), _state(self)
    state.backend.family.build_on_first_batch(state.backend, self, a.get("x"))
    keras_method = _keras(self, "predict_on_batch")
    return state.backend.predict(self, "predict_on_batch", keras_method, a, state.backend_options)


def _train_on_batch(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' train_on_batch on the batch this worker passes; the returned numbers are averaged over workers."""
    _print_plan_once(self)
    a = _arguments(self, "train_on_batch", args, kwargs)
    _state(self).backend.check_batch(_batch_arrays(a))
    return _averaged(self, "train_on_batch", a)


def _batch_arrays(arguments: dict) -> list:
    """The arrays of a *_on_batch call's x, y and sample_weight."""
    arrays: list = []
    for name in ("x", "y", "sample_weight"):
        value = arguments.get(name)
        if value is not None:
            arrays.extend(flatten(value))
    return arrays


def _test_on_batch(self, *args: Any, **kwargs: Any) -> Any:
    """Keras' test_on_batch on the batch this worker passes, averaged over workers."""
    a = _arguments(self, "test_on_batch", args, kwargs)
    _state(self).backend.check_batch(_batch_arrays(a))
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
    with _state(self).backend.loading():
        return _keras(self, "load_weights")(*args, **kwargs)


_METHODS: dict[str, Callable[..., Any]] = {
    "compile": _compile,
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
    state = _state(model)
    state.backend.family.build_on_first_batch(state.backend, model, arguments.get("x"))
    arguments = {**arguments, "return_dict": True}
    if name == "evaluate":
        logs = combined = state.backend.evaluate(model, _keras(model, name), arguments, whole)
    else:
        with state.backend.keras_steps():
            logs = _keras(model, name)(**arguments)
        combined = state.backend.reduce_results(model, logs)  # the metric states are still there
    if return_dict:
        return combined
    return _keras_private.results_in_keras_order(model, {n: combined[n] for n in logs})


def _saved(model: Any, name: str, args: tuple, kwargs: dict, may_be_folder: bool) -> None:
    """Keras' save or save_weights through the backend (who writes; atomic); overwrite=False is Keras'."""
    a = _arguments(model, name, args, kwargs)
    target = a.pop("filepath")
    _state(model).backend.save(
        target,
        lambda path: _keras(model, name)(path, **a),
        may_be_folder=may_be_folder,
        replace=a.get("overwrite", True) is not False,
    )


def _quiet_unless_chief(arguments: dict, backend: Backend) -> None:
    """Keras' progress output on the chief only (the others would print the same lines again)."""
    arguments["verbose"] = arguments.get("verbose", "auto") if backend.is_chief else 0


def _check_same_feed(backend: Backend, request: FeedRequest, feed: Feed) -> None:
    """What a feed read to begin with (a generator's first step: kscale.sharding.GeneratorShard) must be
    the same on every worker, as arrays must (one small gather)."""
    if feed.fingerprint and request.shard.count > 1:
        gathered = backend.gather(agreement.data_fingerprint(feed.fingerprint))
        agreement.check_same_data(gathered, request.what)


def _check_same_data(backend: Backend, request: FeedRequest, x: Any, y: Any, sample_weight: Any) -> None:
    """Data cut into a part per worker must be the same data on every worker (one small gather): else
    the parts overlap and miss samples (an unseeded shuffle or split), or are cut twice (a script that
    already took its own part). Arrays are compared by a sample of their rows; a Keras Sequence / PyDataset
    (cut by batch) by its length and the targets and sample weights of a few of its batches (its first,
    middle and last): one that shuffles itself unseeded in __init__, as ImageDataGenerator().flow-shaped
    ones do, differs there. Not its inputs, which random augmentation may change on every read. tf.data
    datasets and generators are read, not compared."""
    if request.shard.count < 2:
        return
    if is_array_data(x):
        arrays = [a for value in (x, y, sample_weight) if value is not None for a in flatten(value)]
    elif isinstance(x, backend.keras_module().utils.Sequence) and len(x) > 0:
        picked = sorted({0, len(x) // 2, len(x) - 1})
        batches = [x[i] for i in picked]
        targets = [part for b in batches if isinstance(b, tuple | list) for part in b[1:] if part is not None]
        if not targets:  # inputs only (an autoencoder's): nothing that augmentation leaves alone
            return
        arrays = [np.asarray([len(x)]), *(np.asarray(a) for t in targets for a in flatten(t))]
    else:
        return
    agreement.check_same_data(backend.gather(agreement.data_fingerprint(arrays)), request.what)


def _request(
    state: _State,
    per_replica: int,
    shuffle: bool,
    user_steps: int | None,
    what: str,
    evaluation: bool = False,
    whole: bool = False,
) -> FeedRequest:
    """What one worker is asked to feed: its shard, and steps counted for one replica divided among them;
    `whole`: all of the evaluation data on every process, in global batches (Backend.evaluates_whole).

    Evaluation without a step count, where the backend allows it, takes every sample: the workers' parts
    may differ by one, and the metric states are combined at the end. Evaluation shards the data also when
    training does not (divide_epochs), so that each sample is evaluated once."""
    backend, policy = state.backend, state.options.data_policy
    steps = user_steps
    sharding_policy = policy in (DataPolicy.SHARD, DataPolicy.EVERY_SAMPLE)
    if user_steps is not None and sharding_policy:
        steps = divide_steps(
            user_steps, backend.num_replicas, "steps_per_epoch" if "train" in what else "steps"
        )
    uneven = evaluation and user_steps is None and backend.uneven_evaluation
    if sharding_policy or (uneven and policy is DataPolicy.DIVIDE_EPOCHS):
        shard = Shard(backend.worker_index, backend.num_workers, even=not uneven)
    else:
        shard = Shard()
    if evaluation and whole:  # all of it on every process, in global batches
        shard, steps, per_replica = Shard(), user_steps, per_replica * backend.num_replicas
    return FeedRequest(
        per_replica,
        shuffle,
        steps,
        what,
        policy.value,
        shard,
        backend.replicas_per_worker,
        backend.equal_batches,
        evaluation,
    )


def _set_batch_size(arguments: dict, name: str, batch_size: int | None) -> None:
    """Keras takes a batch size only for array input; the data holds it otherwise."""
    if batch_size is None:
        arguments.pop(name, None)
    else:
        arguments[name] = batch_size


def _per_replica_batch(state: _State, batch_size: Any) -> int:
    if batch_size is None:
        return _KERAS_DEFAULT_BATCH
    if isinstance(batch_size, numbers.Integral) and not isinstance(batch_size, bool):
        batch_size = int(batch_size)  # numpy integers, as Keras accepts them
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise OptionError(f"batch_size={batch_size!r} must be a positive integer.")
    if state.options.batch_semantics is BatchSemantics.PER_REPLICA:
        return batch_size
    replicas = state.backend.num_replicas
    if batch_size < replicas or batch_size % replicas:
        raise DataError(
            f"global batch_size={batch_size} cannot be split evenly over {replicas} replicas; give a "
            f"multiple of {replicas} (e.g. {max(replicas, batch_size // replicas * replicas)}), or use "
            "batch_semantics='per_replica' and pass the per-replica batch."
        )
    return batch_size // replicas


def _set_warmup(state: _State, steps_per_epoch: int | None) -> None:
    if not state.warmup:
        return
    if steps_per_epoch is None:
        raise DataError(
            "warmup_epochs needs to know the steps per epoch: pass steps_per_epoch to fit, or give data "
            "of known length."
        )
    state.scaling.set_warmup(max(1, round(state.options.warmup_epochs * steps_per_epoch)))


def _print_plan_once(model: Any) -> None:
    state = _state(model)
    if state.plan_printed or not state.options.print_plan:
        return
    state.plan_printed = True
    log.chief(state.plan.describe(), state.backend.is_chief)


def _unpack_validation(validation_data: Any) -> tuple[Any, Any, Any]:
    if isinstance(validation_data, tuple | list) and 2 <= len(validation_data) <= 3:
        return (*validation_data, None)[:3]
    return validation_data, None, None
