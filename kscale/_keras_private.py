"""The few private Keras attributes kscale reads, in one place, each with the reason no public one serves.

tests/unit/test_keras_private.py checks each of them on the installed Keras, so an upgrade that renames
one fails there, loudly, instead of somewhere inside fit().
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from kscale import instance_methods


def compile_arguments(model: Any) -> dict:
    """The arguments `model.compile()` was last called with, as the objects the user passed.

    Public `model.get_compile_config()` returns them serialized, and serializing fails for a lambda loss
    and loses any loss or metric function that is not registered with Keras; kscale must hand the same
    objects back to `compile()`, so it reads the dict Keras keeps before serializing it.
    """
    stored = getattr(model, "_compile_config", None)
    return dict(stored.config) if stored is not None else {}


def set_model_strategy(model: Any, strategy: Any) -> None:
    """Tell a tf.keras model built outside `strategy` that it trains in it (its weights all live there).

    tf.keras takes a model's strategy from the scope it was built in and keeps it in
    `_distribution_strategy` (read by the public `distribute_strategy`, by fit and compile); there is no
    public setter.
    """
    model._distribution_strategy = strategy


def on_stateful_rnn_refused(keras: Any, error: Any) -> None:
    """tf.keras refuses a stateful RNN in its layer's constructor while a tf.distribute strategy is the
    process's (`RNN.__init__` raises "Stateful RNNs ... are not yet supported with tf.distribute.Strategy"),
    before kscale ever sees the model: that ValueError becomes `error(names)`, a KScaleError saying which
    backend trains it (wrapped once). Keras has no hook there; tests/unit/test_keras_private.py checks the
    message it raises."""
    rnn = keras.layers.RNN
    own = rnn.__init__
    if getattr(own, "_kscale_refusal", False):
        return

    @functools.wraps(own)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            own(self, *args, **kwargs)
        except ValueError as err:
            if not str(err).startswith("Stateful RNNs"):
                raise
            raise error(kwargs.get("name") or type(self).__name__) from err

    __init__._kscale_refusal = True
    rnn.__init__ = __init__


def set_keras3_model_strategy(model: Any, strategy: Any) -> None:
    """Tell a Keras 3 model (TensorFlow backend) built outside `strategy` that it trains in it (its weights
    all live there): Keras 3 keeps the strategy it was built in as `_distribute_strategy` (read by the
    public `distribute_strategy`, by fit and evaluate); there is no public setter."""
    model._distribute_strategy = strategy


def unset_models_strategy(strategy: Any, keep: Any) -> None:
    """Every live tf.keras model built in `strategy` (other than `keep`) forgets it, as one built outside.

    A model built while `strategy` was the process's (kscale sets it at import, and leaves it at the first
    distribute()) keeps it in `_distribution_strategy`; tf.keras' compile then refuses the metric objects a
    script creates after that (keras.io's knowledge distillation compiles its student after training the
    teacher). Its weights stay in the strategy, where distribute() finds them (adopt_into_strategy). No
    public API lists models: the garbage collector's list of live objects, read once.
    """
    import tensorflow as tf

    for model in gc.get_objects():
        if (
            isinstance(model, tf.keras.Model)
            and model is not keep
            and vars(model).get("_distribution_strategy") is strategy
        ):
            model._distribution_strategy = None


def learning_rate_object(optimizer: Any) -> Any:
    """The optimizer's learning rate as given: a float variable, or the LearningRateSchedule itself.

    Public `optimizer.learning_rate` returns, for a schedule, the variable holding the current rate, not
    the schedule; scaling must wrap the schedule so it keeps decaying.
    """
    rate = getattr(optimizer, "_learning_rate", None)
    if rate is None and hasattr(optimizer, "_get_hyper"):  # Keras 2 legacy optimizers keep it as a hyper
        rate = optimizer._get_hyper("learning_rate")
    return rate


#: Keras 3's optimizers read their rate through this method, for an update (the rate `update_step` gets,
#: weight decay, torch's too) and for the public `learning_rate` alike; kscale multiplies it during an
#: update only (kscale/keras3/learning_rate.py). Keras has no public hook between the rate as written
#: and the rate applied.
CURRENT_LEARNING_RATE = "_get_current_learning_rate"


def current_learning_rate(cls: type, optimizer: Any) -> Any:
    """Keras 3: the rate `cls`'s own code gives `optimizer` (a variable, or a schedule's value)."""
    return getattr(cls, CURRENT_LEARNING_RATE)(optimizer)


#: Keras 3's TensorFlow optimizers sum the gradients over a strategy's replicas here, after clipping each
#: replica's own (`TFOptimizer._backend_update_step`): kscale reduces them before the optimizer clips
#: (kscale/backends/_replica_mean.py) and makes this method hand them on as they are. No public switch.
KERAS3_GRADIENT_ALL_REDUCE = "_all_reduce_sum_gradients"


#: tf.keras' legacy optimizers (`tf.keras.optimizers.legacy`) read their rate for an update here only
#: (`_prepare_local`'s "lr_t"); the public `lr` reads the hyperparameter as written.
LEGACY_DECAYED_RATE = "_decayed_lr"


def is_legacy_optimizer_class(cls: type) -> bool:
    """tf.keras' legacy OptimizerV2 (no `learning_rate` property: its rate is a hyperparameter)."""
    return hasattr(cls, LEGACY_DECAYED_RATE) and not isinstance(getattr(cls, "learning_rate", None), property)


def legacy_decayed_rate(cls: type, optimizer: Any, var_dtype: Any) -> Any:
    """The rate `cls`'s own code gives a legacy optimizer's update."""
    return getattr(cls, LEGACY_DECAYED_RATE)(optimizer, var_dtype)


def allow_replica_batch_mean(loss: Any) -> None:
    """Let a tf.keras Loss object reduce over its replica's batch (SUM_OVER_BATCH_SIZE, the default) when a
    train_step of one's own calls it under a tf.distribute strategy, as Keras' compile lets the losses it
    is given (the flag is the one `keras/src/engine/compile_utils.py` sets on them). tf.keras raises a
    ValueError otherwise ("Please use Reduction.SUM or NONE...") because a strategy sums the replicas'
    gradients; kscale averages the gradients of a loss Keras did not divide (kscale.backends._replica_mean),
    so the per-replica mean trains as one process does. Keras 3 has no such check."""
    loss._allow_sum_over_batch_size = True


def results_in_keras_order(model: Any, logs: dict) -> Any:
    """evaluate()'s list (return_dict=False) from its dict, in the order Keras itself returns: the loss
    first, then the compiled metrics, then the rest by name (a lone number alone).

    Keras 3 orders the list in the private `Trainer._flatten_metrics_in_order` (a dict's own order puts
    the compiled metrics before the loss); Keras 2's dict is already in `metrics_names` order.
    """
    flatten = getattr(model, "_flatten_metrics_in_order", None)
    if flatten is not None:
        return flatten(logs)
    values = list(logs.values())
    return values[0] if len(values) == 1 else values


def callback_hook_flags(callback: Any) -> dict[str, Any]:
    """How Keras 2's CallbackList decides whether to call a callback's batch hooks, and with which logs.

    A callback that forwards to another must answer these like the callback it forwards to, or Keras
    calls every batch hook and converts logs to numpy on every batch (a device sync per step).
    """
    return {
        "supports_tf_logs": getattr(callback, "_supports_tf_logs", False),
        "train_batch_hooks": callback._implements_train_batch_hooks,
        "test_batch_hooks": callback._implements_test_batch_hooks,
        "predict_batch_hooks": callback._implements_predict_batch_hooks,
    }


class AnswersBatchHooksOf:
    """A mixin for a Keras 2 Callback that forwards to another (set with `answer_batch_hooks_as`): it
    answers CallbackList's questions (`_implements_*_batch_hooks`, `_supports_tf_logs`: private, no public
    way) as the other does, so Keras skips the batch hooks the other does not have."""

    def _implements_train_batch_hooks(self) -> bool:
        return self._kscale_hooks["train_batch_hooks"]()

    def _implements_test_batch_hooks(self) -> bool:
        return self._kscale_hooks["test_batch_hooks"]()

    def _implements_predict_batch_hooks(self) -> bool:
        return self._kscale_hooks["predict_batch_hooks"]()


def answer_batch_hooks_as(callback: Any, other: Any) -> None:
    """Make `callback` (an AnswersBatchHooksOf) answer Keras' batch-hook questions as `other` does."""
    callback._kscale_hooks = callback_hook_flags(other)
    callback._supports_tf_logs = callback._kscale_hooks["supports_tf_logs"]


def backup_files(backup: Any) -> tuple[str, ...]:
    """The files Keras 3's BackupAndRestore restores from: its weights and its training metadata (the
    epoch to resume at), and the previous pair kept with double_checkpoint. Keras names them in
    `__init__` and exposes only the folder; kscale checks that every process of a job sees the same ones."""
    names = ("_weights_path", "_training_metadata_path", "_prev_weights_path", "_prev_training_metadata_path")
    return tuple(getattr(backup, name) for name in names)


def backup_position(backup: Any) -> tuple[int, int] | None:
    """The epoch and the batch in it after which Keras 3's BackupAndRestore wrote its backup (its training
    metadata file's "epoch" and "batch"), or None where it has none. Keras reads the epoch back and leaves
    the batch unread: a backup written inside an epoch resumes at that epoch's first batch."""
    import json
    import os

    path = backup._training_metadata_path
    if not os.path.exists(path):  # kscale reads it where the backup folder is local (backup_journal)
        return None
    with open(path) as f:
        metadata = json.load(f)
    return int(metadata["epoch"]), int(metadata.get("batch", 0))


def backup_in_epoch(backup: Any, epoch: int) -> None:
    """Tell Keras 3's BackupAndRestore the epoch under way, for the backups it writes inside it.

    Keras 3's callback writes `_current_epoch` as the epoch to resume at, and sets it only when an epoch
    ends: after a restore it is 0 for the whole first epoch, and a backup written inside that epoch
    (save_freq=N) sends the next restart back to epoch 0 with the later weights (measured: 115 steps
    instead of 64, silently). tf.keras sets it when an epoch begins, as here; no public attribute exists."""
    backup._current_epoch = epoch


def backup_written_at_this_batch(backup: Any) -> bool:
    """Whether Keras 3's BackupAndRestore (`save_freq=N`) wrote a backup in the on_train_batch_end just
    called: its count of batches since the last backup is 0 again only then (and it has no public one)."""
    return backup.save_freq != "epoch" and backup._batches_seen_since_last_saving == 0


def backup_counts_from(backup: Any, batch: int) -> None:
    """Keras 3's BackupAndRestore counts the batches to its next backup from `batch`, where a backup was
    written: a job resumed inside an epoch goes on backing up at the stopped run's batches. Keras starts
    counting at the epoch's first batch, and has no public way to set it."""
    backup._last_batch_seen = batch
    backup._batches_seen_since_last_saving = 0


def restored_backup_position(model: Any) -> tuple[int, int] | None:
    """tf.keras: the epoch and the batch in it after which the backup that BackupAndRestore restored (in its
    on_train_begin) was written, or None where it restored none written inside an epoch. tf.keras keeps
    them in variables of the checkpoint (`model._training_state`, a WorkerTrainingState), and reads them
    when fit starts; no public API shows them."""
    state = getattr(model, "_training_state", None)
    if state is None:
        return None
    epoch, batch = int(state._ckpt_saved_epoch.numpy()), int(state._ckpt_saved_batch.numpy())
    return None if batch < 0 or epoch < 0 else (epoch, batch)


def resume_after_batch(model: Any, batch: int) -> None:
    """tf.keras: the fit about to start resumes the restored backup's epoch after `batch` of it, not after
    the batch the backup was written at. fit reads the restored checkpoint's batch right after the
    callbacks' on_train_begin (WorkerTrainingState.maybe_load_initial_counters_from_ckpt) and counts it in
    its own batches; `initial_epoch` is the only public counter, and it has no step."""
    model._training_state._ckpt_saved_batch.assign(batch)


def clone_uncompiled(keras: Any, model: Any) -> Any:
    """Keras 3's `clone_model` of a compiled model, nested models included, left uncompiled.

    Keras 3's clone_model compiles a Sequential or functional copy from `get_compile_config()`, which
    fails for a custom loss or metric class that is not registered (most users' own Metric subclasses)
    and would share nothing with the objects kscale compiles the copy with anyway. Keras has no switch
    for it: it reads the `compiled` attribute, so that is set aside for the copy.
    """
    compiled = model.compiled
    model.compiled = False
    try:
        # recursive: a model nested in it (a BERT encoder) is copied layer by layer too, where from_config
        # would need its custom layers registered.
        return keras.models.clone_model(model, recursive=True)
    finally:
        model.compiled = compiled


def on_distribution_loss_scaling(keras: Any, callback: Any, unscaled_while: Any = None) -> None:
    """Have `callback()` called whenever a loss is divided by the replicas of a tf.distribute strategy:
    by Keras (the built-in train_step, compute_loss / compiled_loss, Keras 3's Loss objects), or by
    TensorFlow's `tf.nn.compute_average_loss` (per-example losses over the global batch, as TensorFlow's
    distributed-training guides average them, in a train_step of one's own too).

    kscale must know whether the loss a training step applies was divided so (then the replicas' summed
    gradients are their mean) or not (a train_step's own loss: kscale divides the gradients). Neither
    library has a hook; every such division goes through one function, wrapped here once: Keras 2's
    `<keras>.src.utils.losses_utils.scale_loss_for_distribution`, Keras 3's
    `keras.src.losses.loss.scale_loss_for_distribution`, and the public `tf.nn.compute_average_loss`
    (looked up when a step is traced, so the wrapper is what a train_step calls).

    While `unscaled_while()` is true, Keras' division (and Keras 3's undoing of it,
    `unscale_loss_for_distribution`, which its own step applies before tracking the loss) returns the
    value as it is, and `callback` is not called: a train_step of the user's own then tracks the loss one
    process would (keras.io's `loss_tracker.update_state(loss)` logged it N times too small in Keras 3,
    and skewed Keras 2's loss tracker, which compiled_loss updates too), and kscale divides its gradients
    instead. `tf.nn.compute_average_loss` then averages over the replica's batch, unless it is given a
    global batch size (a step written for a strategy).
    """
    import importlib

    root = keras.losses.Loss.__module__.split(".")[0]  # keras, or tf_keras for TF_USE_LEGACY_KERAS
    generation_3 = hasattr(keras, "ops")
    module = importlib.import_module(
        f"{root}.src.losses.loss" if generation_3 else f"{root}.src.utils.losses_utils"
    )
    _call_first(module, "scale_loss_for_distribution", callback)
    if unscaled_while is not None:
        _identity_while(module, "scale_loss_for_distribution", unscaled_while)
        if generation_3:  # Keras 2 tracks its loss before dividing it, and has nothing to undo
            _identity_while(module, "unscale_loss_for_distribution", unscaled_while)
    try:
        import tensorflow as tf
    except ImportError:  # Keras 3 on JAX: no tf.distribute strategy, no tf.nn
        return
    _call_first(tf.nn, "compute_average_loss", callback)
    if unscaled_while is not None:
        _replica_average_while(tf.nn, unscaled_while)


def on_loss_reduction(keras: Any, scaled_sum: Any, check: Any) -> None:
    """Every Keras loss reduces its per-sample values in one function (Keras 3:
    `keras.src.losses.loss.reduce_values`, Keras 2: `<keras>.src.utils.losses_utils.reduce_weighted_loss`),
    looked up by name when a loss is called: wrapped here once, so that a sum is `scaled_sum(sum)` and
    `check(reduction, has_sample_weight)` sees every reduction (kscale.loss_reduction). No public hook
    exists between a Loss object and its reduction; tests/unit/test_keras_private.py and
    tests/keras3/test_keras3_private.py fail when a release moves it."""
    import importlib

    root = keras.losses.Loss.__module__.split(".")[0]  # keras, or tf_keras for TF_USE_LEGACY_KERAS
    if hasattr(keras, "ops"):
        module = importlib.import_module(f"{root}.src.losses.loss")
        original = module.reduce_values
        if getattr(original, "_kscale_reduction", False):
            return

        @functools.wraps(original)
        def reduce_values(
            values: Any, sample_weight: Any = None, reduction: Any = "sum_over_batch_size"
        ) -> Any:
            check(reduction, sample_weight is not None)
            loss = original(values, sample_weight, reduction)
            return scaled_sum(loss) if reduction == "sum" else loss

        reduce_values._kscale_reduction = True
        module.reduce_values = reduce_values
        weighted = module.reduce_weighted_values

        @functools.wraps(weighted)
        def reduce_weighted_values(values: Any, sample_weight: Any = None, *args: Any, **kwargs: Any) -> Any:
            reduction = kwargs.get("reduction", args[1] if len(args) > 1 else "sum_over_batch_size")
            per_sample = tuple(getattr(values, "shape", ())) != ()
            check(reduction, sample_weight is not None, per_sample)
            return weighted(values, sample_weight, *args, **kwargs)

        module.reduce_weighted_values = reduce_weighted_values
        return
    module = importlib.import_module(f"{root}.src.utils.losses_utils")
    original = module.reduce_weighted_loss
    if getattr(original, "_kscale_reduction", False):
        return
    summed = keras.losses.Reduction.SUM
    import tensorflow as tf

    @functools.wraps(original)
    def reduce_weighted_loss(weighted_losses: Any, reduction: Any = None) -> Any:
        reduction = keras.losses.Reduction.SUM_OVER_BATCH_SIZE if reduction is None else reduction
        loss = original(weighted_losses, reduction)
        if reduction != summed:
            return loss
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas == 1:
            return scaled_sum(loss)
        # Under a strategy tf.keras multiplies a sum's loss metric by the replicas itself
        # (compile_utils.LossesContainer), each replica's weighed by its rows: the gradient takes the whole
        # factor (R / w), the value R / w divided by R (1 in full steps), so that a slice of m_r rows of a
        # shared last step of m adds m × its sum to the loss metric, as one process adds m × the step's.
        factor = scaled_sum(tf.ones_like(loss))

        @tf.custom_gradient
        def gradient_scaled(value: Any) -> Any:
            return value * (factor / replicas), lambda upstream: upstream * factor

        return gradient_scaled(loss)

    reduce_weighted_loss._kscale_reduction = True
    module.reduce_weighted_loss = reduce_weighted_loss
    weighted = module.compute_weighted_loss

    @functools.wraps(weighted)
    def compute_weighted_loss(losses: Any, sample_weight: Any = None, *args: Any, **kwargs: Any) -> Any:
        shape = getattr(losses, "shape", None)
        per_sample = shape is None or shape.rank is None or shape.rank > 0
        check(kwargs.get("reduction", args[0] if args else None), sample_weight is not None, per_sample)
        return weighted(losses, sample_weight, *args, **kwargs)

    module.compute_weighted_loss = compute_weighted_loss


def _call_first(namespace: Any, name: str, callback: Any) -> None:
    """`namespace.name` replaced, once, by a function that calls every registered callback, then it."""
    original = getattr(namespace, name)
    if getattr(original, "_kscale_callbacks", None) is None:

        @functools.wraps(original)
        def calling_back(*args: Any, **kwargs: Any) -> Any:
            for call in calling_back._kscale_callbacks:
                call()
            return original(*args, **kwargs)

        calling_back._kscale_callbacks = []
        setattr(namespace, name, calling_back)
    watched = getattr(namespace, name)._kscale_callbacks
    if callback not in watched:
        watched.append(callback)


def _identity_while(namespace: Any, name: str, predicate: Any) -> None:
    """`namespace.name(value)` returns `value` as it is while `predicate()` is true (wrapped once)."""
    current = getattr(namespace, name)
    if getattr(current, "_kscale_identity_while", None) is not None:
        current._kscale_identity_while = predicate
        return

    @functools.wraps(current)
    def maybe_identity(value: Any, *args: Any, **kwargs: Any) -> Any:
        if maybe_identity._kscale_identity_while():
            return value
        return current(value, *args, **kwargs)

    maybe_identity._kscale_identity_while = predicate
    setattr(namespace, name, maybe_identity)


def _replica_average_while(nn: Any, predicate: Any) -> None:
    """`nn.compute_average_loss` averages over this replica's batch while `predicate()` is true and no
    global batch size is given (what one process computes; kscale divides the gradients), else over the
    global batch as TensorFlow does (wrapped once)."""
    current = nn.compute_average_loss
    if getattr(current, "_kscale_replica_while", None) is not None:
        current._kscale_replica_while = predicate
        return
    original = getattr(current, "__wrapped__", current)  # TensorFlow's own, without kscale's note

    @functools.wraps(current)
    def average(per_example_loss: Any, sample_weight: Any = None, global_batch_size: Any = None) -> Any:
        if global_batch_size is None and average._kscale_replica_while():
            import tensorflow as tf

            replica_batch = tf.shape(per_example_loss)[0]
            return original(per_example_loss, sample_weight, global_batch_size=replica_batch)
        return current(per_example_loss, sample_weight, global_batch_size)

    average._kscale_replica_while = predicate
    nn.compute_average_loss = average


@contextlib.contextmanager
def h5_weights_read_whole(keras: Any) -> Iterator[None]:
    """tf.keras' `.weights.h5` (and `.keras`) loading with each stored array read into memory first.

    tf.keras' new-format loading (`saving_lib.H5IOStore.get`) hands each object's `load_own_variables` the
    file's h5py datasets, which `variable.assign` takes, except a variable synchronised on read (a
    metric's state) under a tf.distribute strategy: it divides the value by the replicas before converting
    it ("unsupported operand type(s) for /: 'Dataset' and 'int'", with or without kscale). Arrays are what
    every other variable converts them to. Keras has no public switch; tests/unit/test_keras_private.py
    fails when an upgrade changes the store.
    """
    import importlib

    import numpy as np

    root = keras.losses.Loss.__module__.split(".")[0]  # keras, or tf_keras for TF_USE_LEGACY_KERAS
    store = importlib.import_module(f"{root}.src.saving.saving_lib").H5IOStore
    original = store.get

    def get(self: Any, path: str) -> Any:
        group = original(self, path)
        return {name: np.asarray(group[name]) for name in group}

    store.get = get
    try:
        yield
    finally:
        store.get = original


#: The keyword Keras' own fit passes to `evaluate` when it validates (both generations): the validation
#: data is then already the iterator fit made of kscale's feed. kscale must tell that call from a user's
#: evaluate (which it feeds itself); Keras has no public sign of it.
_FIT_VALIDATION_FLAG = "_use_cached_eval_dataset"


def is_fit_validation(evaluate_kwargs: dict) -> bool:
    """Whether this evaluate() call is Keras' fit validating (its data already fed by kscale)."""
    return bool(evaluate_kwargs.get(_FIT_VALIDATION_FLAG))


@contextlib.contextmanager
def keras3_strategy_fixed() -> Iterator[None]:
    """Keras 3's TensorFlow trainer corrected to run under MultiWorkerMirroredStrategy (keras-team/keras#20585)
    and under MirroredStrategy with string inputs, for the time of the `with` block only; Keras' own code is
    back in place after it.

    Four private pieces of Keras' TensorFlow trainer fail, and Keras has no public switch for any
    (tests/keras3/test_keras3_private.py fails when a Keras release changes them):

    - `TensorFlowTrainer._maybe_symbolic_build` builds the model from the first batch reduced with
      `strategy.reduce("MEAN", batch)`, which CollectiveAllReduce cannot do for a tuple of tensors, and no
      strategy can do for a string column (AddN; keras.io's structured data with lookup layers). The
      symbolic build needs the batch's shapes and dtypes only: the first replica's element spec of the
      data (the epoch iterator's `_get_iterator()`, a PerReplicaSpec's `_value_specs`) is used instead,
      and no batch is read.
    - `CompileLoss.call` weighs each output's own loss tracker by the static batch size, None in a
      strategy's step over batches of varying size (Keras then weighs every batch alike: per-output
      losses off where one process's are not): the rows of the batch, read when the step runs.
    - `reduce_per_replica` reduces the step's scalar results with `strategy.reduce("MEAN", v, axis=0)`
      ("Invalid reduction dimension 0 for input with 0 dimensions"): they are reduced with `axis=None`
      where they have no dimension.
    - `Trainer._get_metrics_result_or_logs` reads an epoch's logs from the metrics' states only where the
      last step's logs have the metrics' own names. A `train_step` returning `{m.name: m.result() for m
      in self.metrics}` gives the compiled metrics as one nested dict (Keras' callbacks flatten it), so
      the step's numbers were kept: under a strategy, the replicas' mean of each replica's own result
      (an RMSE or an accuracy over unequal parts off; generated seeds 298, 360, 361 of C-tf). The names
      are compared as the callbacks see them, flattened.

    The `reduce_per_replica` correction leaves any other strategy to Keras' own code. The step functions Keras traces inside
    the block keep the corrected code; nested blocks are one.
    """
    import importlib

    trainer = importlib.import_module("keras.src.backend.tensorflow.trainer")
    if getattr(trainer, "_kscale_multi_worker_fixed", False):
        yield
        return
    needed = (
        "reduce_per_replica",
        "_collective_all_reduce_multi_worker",
        "_is_per_replica_instance",
        "tree",
        "TFEpochIterator",
    )
    missing = [name for name in needed if not hasattr(trainer, name)]
    if not missing and not hasattr(trainer.TFEpochIterator, "_get_iterator"):
        missing = ["TFEpochIterator._get_iterator"]
    if not missing and not hasattr(trainer.TensorFlowTrainer, "_get_metrics_result_or_logs"):
        missing = ["Trainer._get_metrics_result_or_logs"]
    if missing or not hasattr(trainer.TensorFlowTrainer, "_maybe_symbolic_build"):
        import keras

        from kscale.errors import BackendError

        raise BackendError(
            f"Keras {keras.__version__}'s TensorFlow trainer is not the one kscale corrects for "
            f"MultiWorkerMirroredStrategy (keras-team/keras#20585; checked on Keras 3.15): it lacks "
            f"{', '.join(missing) or 'TensorFlowTrainer._maybe_symbolic_build'}. Train Keras 3 on several "
            "processes with KERAS_BACKEND=jax, or install the Keras version kscale was tested with "
            "(pip install 'keras==3.15.*'), or use tf.keras with TF_USE_LEGACY_KERAS=1 and tf_keras."
        )
    tree = trainer.tree
    original_reduce = trainer.reduce_per_replica
    original_build = trainer.TensorFlowTrainer._maybe_symbolic_build
    in_multi_worker = trainer._collective_all_reduce_multi_worker
    compile_loss = importlib.import_module("keras.src.trainers.compile_utils").CompileLoss
    original_loss_call = compile_loss.call

    def loss_call(self: Any, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        # Each output's own loss tracker is weighed by `tree.flatten(y_pred)[0].shape[0]`, the static
        # batch size: None in a strategy's step, whose batches differ in size, so Keras weighed every
        # batch alike. The batch's rows instead, read when the step runs.
        import keras

        rows = keras.ops.shape(tree.flatten(y_pred)[0])[0]
        trackers = [m for m in self.metrics if m is not None]

        def weighed(update: Any) -> Any:
            return lambda values, sample_weight=None: update(
                values, sample_weight=rows if sample_weight is None else sample_weight
            )

        for tracker in trackers:
            object.__setattr__(tracker, "update_state", weighed(tracker.update_state))
        try:
            return original_loss_call(self, y_true, y_pred, sample_weight)
        finally:
            for tracker in trackers:
                object.__delattr__(tracker, "update_state")

    def reduce_per_replica(values: Any, strategy: Any, reduction: str) -> Any:
        if in_multi_worker(strategy) and reduction in ("auto", "mean"):

            def mean(value: Any) -> Any:
                rank = (
                    value.values[0].shape.rank
                    if trainer._is_per_replica_instance(value)
                    else value.shape.rank
                )
                return strategy.reduce("MEAN", value, axis=0 if rank else None)

            return tree.map_structure(mean, values)
        return original_reduce(values, strategy, reduction)

    def _maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        if self._distribute_strategy is None or iterator is None:
            return original_build(self, iterator=iterator, data_batch=data_batch)

        def first_local_spec(spec: Any) -> Any:
            return getattr(spec, "_value_specs", (spec,))[0]  # a PerReplicaSpec's first replica's

        # The symbolic build reads a batch's shapes and dtypes only: the first replica's, from the data's
        # element spec. No iterator is made (Keras' own build makes one and reads a batch): each iterator
        # of a seeded shuffle() draws an order, and one process, which builds on its first step, draws
        # none here; starting one over a multi-worker dataset also costs about a second.
        specs = tree.map_structure(first_local_spec, iterator._get_iterator().element_spec)
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=specs)

    def _get_metrics_result_or_logs(self: Any, logs: Any) -> Any:
        metric_logs = self.get_metrics_result()
        # Keras' own rule, its names compared flattened: the metrics read once, not again in Keras' method
        if isinstance(logs, dict) and _flat_names(logs) == set(metric_logs):
            return metric_logs
        return logs

    own_results_or_logs = trainer.TensorFlowTrainer.__dict__.get(_RESULTS_OR_LOGS)
    trainer.reduce_per_replica = reduce_per_replica
    trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    setattr(trainer.TensorFlowTrainer, _RESULTS_OR_LOGS, _get_metrics_result_or_logs)
    compile_loss.call = loss_call
    trainer._kscale_multi_worker_fixed = True
    try:
        yield
    finally:
        trainer.reduce_per_replica = original_reduce
        trainer.TensorFlowTrainer._maybe_symbolic_build = original_build
        if own_results_or_logs is None:
            delattr(trainer.TensorFlowTrainer, _RESULTS_OR_LOGS)
        else:
            setattr(trainer.TensorFlowTrainer, _RESULTS_OR_LOGS, own_results_or_logs)
        compile_loss.call = original_loss_call
        trainer._kscale_multi_worker_fixed = False


_RESULTS_OR_LOGS = "_get_metrics_result_or_logs"


def _flat_names(logs: dict) -> set:
    """The names of `logs` as Keras' callbacks see them: a nested dict's own names in its place."""
    names: set = set()
    for name, value in logs.items():
        names |= _flat_names(value) if isinstance(value, dict) else {name}
    return names


def array_orders(
    keras: Any, count: int, batch_size: int, epochs: int, shuffle: Any, peeked: bool = False
) -> Any:
    """The order of `count` samples in each of the `epochs` epochs of `fit(x, y, batch_size, shuffle=...)` on
    arrays, in one process: drawn by Keras' own array adapter, from the random state it draws from (tf.keras
    and Keras 3 on TensorFlow: the seeds of a `tf.random.shuffle` in its dataset; Keras 3 on JAX: NumPy's
    global generator; on torch: torch's, through a DataLoader's RandomSampler), as fit makes and reads it
    (tf.keras: one dataset of every epoch's order; Keras 3: an iterator per epoch). Keras has no public way
    to the order it draws; tests/unit/test_keras_private.py and tests/keras3/test_keras3_private.py compare
    these with the orders fit trains on.

    `peeked`: Keras 3 reads a batch before the first epoch to build the model (`fits_after_a_peek`), from
    an iterator of its own, which draws an order on JAX and torch that no epoch trains on; and after each
    epoch it makes the next epoch's iterator, unread (on torch, a DataLoader's iterator draws its base
    seed from torch's generator when made).

    Returns the orders (epochs × count) and what to call when fit ends with the number of epochs it began,
    or None: the random state as one process's fit of that many epochs leaves it (EarlyStopping may end it
    before `epochs`; on torch the DataLoaders kscale's own feed reads draw from it too). TensorFlow: None,
    its orders are seeds."""
    import importlib

    import numpy as np

    indices = np.arange(count, dtype=np.int64)
    root = keras.losses.Loss.__module__.split(".")[0]  # keras, or tf_keras for TF_USE_LEGACY_KERAS
    if not hasattr(keras, "ops"):
        adapters = importlib.import_module(f"{root}.src.engine.data_adapter")
        adapter = adapters.TensorLikeDataAdapter(
            indices, batch_size=batch_size, epochs=epochs, shuffle=shuffle
        )
        flat = np.concatenate([_first_leaf(batch) for batch in adapter.get_dataset()])
        return flat.reshape(epochs, count), None
    adapters = importlib.import_module(f"{root}.src.trainers.data_adapters.array_data_adapter")
    adapter = adapters.ArrayDataAdapter(indices, batch_size=batch_size, shuffle=shuffle)
    backend = keras.config.backend()
    if backend == "tensorflow":  # its orders are its dataset's seeds': a peek changes none
        dataset = adapter.get_tf_dataset()
        passes = [iter(dataset) for _ in range(epochs)]  # a new iterator each epoch, as Keras makes them
        return np.stack([np.concatenate([_first_leaf(batch) for batch in epoch]) for epoch in passes]), None
    if backend == "torch":
        # Keras 3.15 draws from torch's generator (a new loader each epoch, the next one made unread after
        # it); Keras' development branch (3.16) seeds each epoch's shuffle with the adapter's epoch count
        return _torch_epoch_orders(epochs, peeked, x=indices, batch_size=batch_size, shuffle=shuffle)
    if peeked:
        next(adapter.get_numpy_iterator())
    orders, states = [], [np.random.get_state()]
    for _ in range(epochs):  # drawn when read
        orders.append(np.concatenate([_first_leaf(batch) for batch in adapter.get_numpy_iterator()]))
        states.append(np.random.get_state())
    return np.stack(orders), _state_after(states, np.random.set_state)


def _state_after(states: list, set_state: Callable[[Any], Any]) -> Callable[[int], None]:
    """What to call when fit ends, with the epochs it began: `states[k]` is the random state after k
    epochs' draws (every epoch's drawn here at once), and one process's fit draws for the epochs it begins
    only (measured in every Keras 3 backend and tf.keras: EarlyStopping after 2 of 4, 2 draws)."""
    return lambda begun: set_state(states[min(begun, len(states) - 1)])


def batch_orders(keras: Any, count: int, epochs: int, peeked: bool = False) -> Any:
    """The order of the `count` batches of a keras.utils.Sequence / PyDataset in each of `epochs` epochs of
    `fit(dataset, shuffle=True)` in one process: Keras shuffles the batch indices with Python's `random`
    when each epoch's generator starts (Keras 2's `KerasSequenceAdapter`, Keras 3's
    `PyDatasetAdapter._finite_generator`), and Keras 3 also when it peeks at a batch before the first epoch
    (`fits_after_a_peek`). Keras documents the shuffle, not the draw; tests/unit/test_keras_private.py and
    tests/keras3/test_keras3_private.py compare these with the orders fit trains on. Returns the orders and
    what to call when fit ends, with the epochs it began (array_orders)."""
    import random

    import numpy as np

    def drawn() -> list[int]:
        order = list(range(count))
        random.shuffle(order)
        return order

    if hasattr(keras, "ops") and keras.config.backend() == "torch":
        return _torch_batch_orders(keras, count, epochs, peeked)
    if peeked and hasattr(keras, "ops"):
        drawn()
    orders, states = [], [random.getstate()]
    for _ in range(epochs):
        orders.append(drawn())
        states.append(random.getstate())
    return np.asarray(orders, np.int64).reshape(epochs, count), _state_after(states, random.setstate)


def _torch_batch_orders(keras: Any, count: int, epochs: int, peeked: bool) -> Any:
    """batch_orders on torch, over a PyDataset whose batches are their indices: Keras 3.15 shuffles with
    Python's `random`, its development branch (3.16) with a `random.Random` seeded by the adapter's epoch
    count."""
    import numpy as np

    class Indices(keras.utils.PyDataset):
        def __len__(self) -> int:
            return count

        def __getitem__(self, index: int) -> Any:
            return np.full((1,), index, np.int64)

    return _torch_epoch_orders(epochs, peeked, x=Indices(), shuffle=True)


def _torch_epoch_orders(epochs: int, peeked: bool, **data: Any) -> Any:
    """The first input of every batch, epoch by epoch (epochs × samples), as Keras 3's torch fit reads
    `data` (its own epoch iterator's arguments) when called as fit calls it: a peek, reset, then each
    epoch; and what to call when fit ends, with the epochs it began (array_orders): torch's generator
    (a DataLoader's sampler) and Python's `random` (a PyDataset's shuffle, Keras 3.15) as it leaves them."""
    import random

    import numpy as np
    import torch
    from keras.src.backend.torch.trainer import TorchEpochIterator

    epoch_iterator = TorchEpochIterator(**data)
    if peeked:
        for _ in epoch_iterator:  # as Trainer._symbolic_build: one step read, the epoch left
            break
    epoch_iterator.reset()
    orders, states = [], [(torch.get_rng_state(), random.getstate())]
    for _ in range(epochs):
        orders.append(np.concatenate([_first_leaf(b).ravel() for _, _, step in epoch_iterator for b in step]))
        states.append((torch.get_rng_state(), random.getstate()))

    def set_state(state: tuple) -> None:
        torch.set_rng_state(state[0])
        random.setstate(state[1])

    return np.stack(orders).astype(np.int64), _state_after(states, set_state)


def _first_leaf(batch: Any) -> Any:
    """A batch's first array (of x, of (x, y) or of ((x1, x2), y))."""
    import numpy as np

    while isinstance(batch, tuple | list):
        batch = batch[0]
    return np.asarray(batch)


def lay_out_whole_steps(is_whole: Any, whole_layout: Any) -> None:
    """Keras 3 on JAX lays every batch of an epoch out as its first one (`JAXEpochIterator.
    _get_distributed_iterator`: the data layouts computed once, each process's batch one shard of the
    global batch). A batch `is_whole(batch)` says is the whole last step of arrays, the same on every
    process (kscale.step_weights.WholeStep), is laid out with `whole_layout(shape)` instead (replicated on
    every device: jax.make_array_from_process_local_data takes each process's copy as the whole). Every
    other batch is laid out as Keras lays it out; the method is replaced once, for every epoch iterator.
    Keras has no public hook there; tests/keras3/test_keras3_private.py checks the method still reads
    its layouts from the distribution and distributes through `_distribute_data`."""
    import inspect

    from keras import tree
    from keras.src.backend.jax import trainer

    iterator = trainer.JAXEpochIterator
    if getattr(iterator._get_distributed_iterator, "_kscale_whole_steps", False):
        return
    source = inspect.getsource(iterator._get_distributed_iterator)
    if "get_data_layout" not in source or "_distribute_data" not in source:
        from kscale.errors import BackendError

        raise BackendError(
            "Keras' JAX trainer no longer lays batches out where kscale expects (JAXEpochIterator."
            "_get_distributed_iterator, checked on Keras 3.15): a last step of arrays the global batch "
            "does not fill cannot be laid out whole. Install the Keras kscale was tested with (pip install "
            "'keras==3.15.*'), or give fit a number of samples the global batch divides."
        )

    def layouts_of(data: Any, layout: Any) -> Any:
        return tree.map_structure(lambda d: None if d is None else layout(d.shape), data)

    def _get_distributed_iterator(self: Any, distribution: Any) -> Any:
        layouts = None
        for data in self.data_adapter.get_jax_iterator():
            if is_whole(data):
                yield trainer._distribute_data(data, layouts_of(data, whole_layout))
                continue
            if layouts is None:
                layouts = layouts_of(data, lambda shape: distribution.get_data_layout(shape).backend_layout)
            yield trainer._distribute_data(data, layouts)

    _get_distributed_iterator._kscale_whole_steps = True
    iterator._get_distributed_iterator = _get_distributed_iterator


def fits_after_a_peek(model: Any) -> bool:
    """Whether Keras 3's fit, in one process, reads a batch to build the model before its first epoch
    (`Trainer._symbolic_build`'s own test: a layer, the compiled metrics or the compiled loss unbuilt, as
    after compile until the first fit or evaluate). Not on TensorFlow, which builds there only under a
    strategy (`_maybe_symbolic_build`)."""
    import keras

    if keras.config.backend() == "tensorflow":
        return False
    metrics, loss = getattr(model, "_compile_metrics", None), getattr(model, "_compile_loss", None)
    return (
        not all(layer.built for layer in model._flatten_layers())
        or (metrics is not None and not metrics.built)
        or (loss is not None and not loss.built)
    )


@dataclasses.dataclass(frozen=True)
class FitIterators:
    """How many iterators of a tf.data dataset Keras' fit creates, in one process, besides the one it reads
    each epoch: `before_first_epoch` when fit starts, `after_each_epoch` when an epoch ends, each dropped
    unread. Keras documents neither, but each one draws the next order of a seeded `shuffle()` that
    reshuffles every iteration: one process trains epoch e on the order drawn after those, and a worker
    that trains on its part of the same order must draw as many. Measured on a dataset of known length
    fit without steps_per_epoch (tests/unit/test_keras_private.py, tests/keras3/test_keras3_private.py)."""

    before_first_epoch: int
    after_each_epoch: int


#: tf.keras (2.15, tf_keras 2.18): DataHandler.enumerate_epochs makes an iterator, then a new one for
#: every epoch (should_recreate_iterator), the first epoch included.
KERAS2_FIT_ITERATORS = FitIterators(before_first_epoch=1, after_each_epoch=0)
#: Keras 3 (3.15): EpochIterator makes one when an epoch starts and another when it has read the data.
KERAS3_FIT_ITERATORS = FitIterators(before_first_epoch=0, after_each_epoch=1)


def symbolic_build_without(model: Any, batch_of: Any) -> None:
    """Keras 3 builds a model before fit's first step from a batch it reads itself
    (`Trainer._symbolic_build`: on JAX and torch always, on TensorFlow under a strategy) and unpacks it as
    (x, y, sample_weight): a batch kscale feeds with a replica's gradient weight around it
    (kscale.step_weights.Weighted) must reach it as `batch_of(batch)`. Keras has no public hook there.
    Bound to the object (once), as Keras binds `train_function`."""
    if "_kscale_symbolic_build" in vars(model):
        return
    build = model._symbolic_build

    def batches(iterator: Any) -> Iterator[tuple]:
        for begin, end, data in iterator:
            if isinstance(data, list | tuple):  # JAX, torch: one execution's batches
                yield begin, end, [batch_of(batch) for batch in data]
            else:  # TensorFlow: an iterator, read as Keras reads it
                yield begin, end, map(batch_of, data)

    def _symbolic_build(iterator: Any = None, data_batch: Any = None) -> Any:
        return build(
            iterator=None if iterator is None else batches(iterator),
            data_batch=None if data_batch is None else batch_of(data_batch),
        )

    object.__setattr__(model, "_symbolic_build", _symbolic_build)
    object.__setattr__(model, "_kscale_symbolic_build", True)


def sum_batch_statistics_over(layer: Any, all_sum: Any) -> bool:
    """Make tf.keras' `BatchNormalization(synchronized=True)` `layer` take the batch statistics of every
    worker's batch together, summed by `all_sum` (a sum over workers of one tensor, with its gradient):
    what the layer does over a tf.distribute strategy's replicas. False where `layer` is no such layer.

    tf.keras sums its statistics with the replica context's `all_reduce`; with no strategy (Horovod's one
    replica per process) that is a sum over this process alone, and every worker normalized by its own
    batch. The layer computes them in one private method, `_calculate_mean_and_var(inputs,
    reduction_axes, keep_dims, mask)` (Horovod's own SyncBatchNormalization overrides `_moments` around
    it); this one, bound to the layer object, makes the same sums (of x, of x², of the count) as
    `_sync_calculate_mean_and_var`, over the workers. Inference (moving statistics) is unchanged. What a
    SavedModel keeps is traced as the layer is, so that it loads where Horovod's ops are not.
    """
    if getattr(layer, "synchronized", False) is not True or not hasattr(layer, "_calculate_mean_and_var"):
        return False
    import tensorflow as tf

    from kscale import _tensorflow_private

    own = type(layer)._calculate_mean_and_var

    def _calculate_mean_and_var(
        self: Any, inputs: Any, reduction_axes: Any, keep_dims: Any, mask: Any = None
    ):
        if _tensorflow_private.writing_a_saved_model():
            return own(self, inputs, reduction_axes, keep_dims, mask=mask)
        y = tf.cast(inputs, tf.float32) if inputs.dtype == tf.float16 else inputs
        if mask is None:
            count = tf.ones_like(y)
        else:
            weights = tf.expand_dims(tf.cast(mask, y.dtype), axis=-1)
            y = y * weights
            count = tf.broadcast_to(weights, tf.shape(y))
        local = tf.stack(
            [
                tf.reduce_sum(y, axis=reduction_axes, keepdims=True),
                tf.reduce_sum(tf.square(y), axis=reduction_axes, keepdims=True),
                tf.reduce_sum(count, axis=reduction_axes, keepdims=True),
            ]
        )
        total, squared_total, count_total = tf.unstack(all_sum(local))
        mean = total / count_total
        variance = squared_total / count_total - tf.square(mean)
        if not keep_dims:
            mean = tf.squeeze(mean, reduction_axes)
            variance = tf.squeeze(variance, reduction_axes)
        if inputs.dtype == tf.float16:
            return tf.cast(mean, tf.float16), tf.cast(variance, tf.float16)
        return mean, variance

    instance_methods.bind(layer, "_calculate_mean_and_var", _calculate_mean_and_var)
    return True


def weigh_synchronized_moments(replica_sum: Any) -> None:
    """Make Keras 3's synchronized BatchNormalization on TensorFlow sum its statistics over the replicas with
    `replica_sum` (kscale.step_weights.weighed_sum(): a gradient that weighs each replica's part by its
    share of the step). Keras 3 sums them in `keras.src.backend.tensorflow.nn._compute_moments_sync(x,
    axes, keepdims)`, looked up by name in `moments`: replaced here once by the same sums (of x, of x², of
    the count, in one all-reduce), made the same way. No public hook exists there;
    tests/keras3/test_keras3_private.py fails when a release moves it."""
    import tensorflow as tf
    from keras.src.backend.tensorflow import nn

    original = nn._compute_moments_sync
    if getattr(original, "_kscale_weighed", False):
        return

    @functools.wraps(original)
    def _compute_moments_sync(x: Any, axes: Any, keepdims: Any) -> Any:
        if tf.distribute.get_replica_context() is None:
            return original(x, axes, keepdims)
        local = tf.stack(
            [
                tf.reduce_sum(x, axis=axes, keepdims=True),
                tf.reduce_sum(tf.square(x), axis=axes, keepdims=True),
                tf.reduce_sum(tf.ones_like(x), axis=axes, keepdims=True),
            ]
        )
        total, squared_total, count = tf.unstack(replica_sum(local))
        mean = tf.math.divide_no_nan(total, count)
        variance = tf.maximum(tf.math.divide_no_nan(squared_total, count) - tf.square(mean), 0.0)
        if not keepdims:
            mean, variance = tf.squeeze(mean, axes), tf.squeeze(variance, axes)
        return mean, variance

    _compute_moments_sync._kscale_weighed = True
    nn._compute_moments_sync = _compute_moments_sync


def losses_per_thread(keras: Any) -> None:
    """Keras 3 keeps the losses a layer adds in its call (`add_loss`: ActivityRegularization, a layer's
    activity_regularizer, the user's own) in one list per layer, `Layer._losses`, cleared when a model's
    call begins and read when its loss is computed. A tf.distribute MirroredStrategy runs each replica's
    step in its own thread, so the replicas share those lists: where they meet mid-step (a synchronized
    BatchNormalization's all-reduce), each replica's loss counted the other's added losses too (History's
    loss 0.0016 off on C-tf, generated seeds 220, 227 and 263; the gradients, taped per thread, exact).
    Made one list per layer and thread here (a data descriptor on Layer, before each instance's own
    attribute), as one thread sees them; done once. No public hook exists;
    tests/keras3/test_keras3_private.py fails when a release moves them."""
    layer_class = keras.layers.Layer
    if isinstance(vars(layer_class).get("_losses"), _LossesPerThread):
        return
    layer_class._losses = _LossesPerThread()


class _LossesPerThread:
    """`Layer._losses` as a list per layer and thread (losses_per_thread)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _lists(self) -> Any:
        lists = getattr(self._local, "lists", None)
        if lists is None:
            lists = self._local.lists = weakref.WeakKeyDictionary()
        return lists

    def __get__(self, layer: Any, owner: Any = None) -> Any:
        if layer is None:
            return self
        return self._lists().setdefault(layer, [])

    def __set__(self, layer: Any, value: Any) -> None:
        self._lists()[layer] = value


def keep_torch_data_parallel_off(model: Any) -> bool:
    """Keras' own torch data parallelism off for a model kscale trains (whether there was any to switch off).

    Keras' development branch (3.16) wraps a torch model in DistributedDataParallel on its first fit,
    evaluate or predict whenever torch.distributed is initialized (`TorchTrainer._initialize_ddp`, kept in
    `ddp_model`, which train_step, test_step and predict_step call instead of the model), and its
    `get_metrics_result` sums every metric variable over the processes. kscale averages gradients and
    combines metric states itself (backends/torch.py says why), and no public switch turns Keras' off:
    `ddp_model` is set to False (Keras wraps only while it is None, and its steps call `ddp_model or
    self`: the model; not the model itself, which Keras' saving would walk into without end), and this
    instance's `get_metrics_result` is the one TorchTrainer overrides (Trainer's: local states, no
    collective). Keras 3.15 and earlier have neither: nothing to do.
    """
    from keras.src.backend.torch.trainer import TorchTrainer

    if not isinstance(model, TorchTrainer) or not hasattr(model, "ddp_model"):
        return False
    object.__setattr__(model, "ddp_model", False)

    def get_metrics_result(self: Any) -> Any:
        return super(TorchTrainer, self).get_metrics_result()

    instance_methods.bind(model, "get_metrics_result", get_metrics_result)
    return True
