"""One process per device under horovodrun (or kscale run): Horovod's ring-allreduce over Gloo or MPI."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import tensorflow as tf

from kscale import (
    _horovod_private,
    _keras_private,
    _optional,
    instance_methods,
    step_weights,
    structures,
    subclassing,
)
from kscale.backends.base import Backend, reduce_in_groups
from kscale.callbacks import AverageMetrics, BroadcastInitialState, ChiefWritesBackup
from kscale.environment import Environment, Launcher
from kscale.errors import BackendError, DataError, OptionError
from kscale.keras2 import rebuild
from kscale.keras2.family import Keras2Family
from kscale.metric_states import assign_shares, reduce_rows, results_from_states


@dataclasses.dataclass(frozen=True)
class HorovodOptions:
    """`distribute()` options of the horovod backend: how gradients travel between workers."""

    #: None, or 'fp16': gradients are sent as float16 (half the bytes; Horovod's Compression.fp16).
    compression: str | None = None
    #: Gradients of this many batches are accumulated locally before one allreduce (Horovod's own option).
    backward_passes_per_step: int = 1
    #: predict(): each worker computes its 1/N of x, and the parts are gathered in order, so every worker
    #: returns the predictions for all of x with each sample computed once (not N times).
    split_predict: bool = False
    #: Elastic mode (horovodrun --min-np/--max-np): also commit the training state every this many batches
    #: (None: at the end of each epoch only). A commit is where workers joining or leaving are noticed, and
    #: what training goes back to when a worker dies.
    elastic_commit_batches: int | None = None

    def __post_init__(self) -> None:
        if self.compression == "none":
            object.__setattr__(self, "compression", None)
        if self.compression not in (None, "fp16"):
            raise OptionError(f"compression={self.compression!r} is not valid; use None or 'fp16'.")
        passes = self.backward_passes_per_step
        if not isinstance(passes, int) or isinstance(passes, bool) or passes < 1:
            raise OptionError(
                f"backward_passes_per_step={passes!r} must be an integer >= 1 (the number of batches whose "
                "gradients are accumulated before one allreduce)."
            )
        commit = self.elastic_commit_batches
        if commit is not None and (not isinstance(commit, int) or isinstance(commit, bool) or commit < 1):
            raise OptionError(
                f"elastic_commit_batches={commit!r} must be None (commit at epoch ends) or an integer >= 1."
            )
        if not isinstance(self.split_predict, bool):
            raise OptionError(f"split_predict={self.split_predict!r} must be True or False.")


class HorovodBackend(Backend):
    name = "horovod"
    Family = Keras2Family
    Options = HorovodOptions

    def __init__(self, env: Environment, devices: list[str] | None = None):
        super().__init__(env, devices)
        self._hvd = None

    @classmethod
    def detect(cls, env: Environment) -> bool:
        return env.launcher in (Launcher.HOROVOD, Launcher.MPI)

    @property
    def hvd(self):
        self.setup()
        return self._hvd

    def setup(self) -> None:
        if self._hvd is not None:
            return
        hvd = _optional.horovod_keras()
        hvd.init()
        self._hvd = hvd

    @property
    def num_workers(self) -> int:
        return self.hvd.size()

    @property
    def worker_index(self) -> int:
        return self.hvd.rank()

    def place_model(self, model: tf.keras.Model) -> tf.keras.Model:
        # Same weights everywhere from this moment on, also for evaluate()/predict() without fit(). Not
        # under elastic Horovod: a worker that joins later would wait here while the others are inside
        # fit, in Horovod's elastic loop, whose own sync gives it the weights.
        variables = rebuild.existing_variables(model)  # none yet: once built (build_on_first_batch)
        if not self.env.elastic and variables:
            _optional.horovod_tensorflow().broadcast_variables(variables, root_rank=0)
        # BatchNormalization(synchronized=True): the global batch's statistics, as under tf.distribute.
        for layer in model.submodules:
            _keras_private.sum_batch_statistics_over(layer, step_weights.weighed_sum(_sum_over_workers))
        return model

    def optimizer_for(self, optimizer: Any, options: HorovodOptions) -> Any:
        hvd, scaled = self.hvd, self.family.rates.with_scaled_class

        def distributed(inner: Any) -> Any:
            inner = scaled(inner)  # below Horovod's class, which calls super(self.__class__, self)
            wrapped = hvd.DistributedOptimizer(
                inner,
                compression=hvd.Compression.fp16 if options.compression == "fp16" else hvd.Compression.none,
                backward_passes_per_step=options.backward_passes_per_step,
                average_aggregated_gradients=True,
            )
            subclassing.save_as(type(wrapped), type(inner))  # saved files name the user's class
            _horovod_private.allreduce_without_autograph(wrapped)  # seconds off every worker's start
            _horovod_private.weigh_before_allreduce(wrapped, step_weights.scale)  # a shared last step
            average_every_update(wrapped)
            return wrapped

        # Under a loss scaling (mixed precision) both go to the optimizer inside it: one new LossScaleOptimizer.
        return rebuild.with_inner(optimizer, distributed)

    def run_fit(
        self, model: tf.keras.Model, fit: Any, options: HorovodOptions, initial_epoch: int = 0
    ) -> Any:
        """Under an elastic horovodrun, Horovod's elastic loop around fit: when workers join or leave (or die),
        every worker goes back to the last commit, Horovod re-forms the ring, and fit runs again from the
        committed epoch, planned anew for the new world (rate, shard, steps; the plan is printed again)."""
        if not self.env.elastic:
            return fit()
        elastic = self.hvd.elastic
        # Horovod syncs and restores optimizer.variables(): the slots must exist on every worker before the
        # first sync, or a worker that joins later sends fewer variables than the others and all hang.
        model.optimizer.build(model.trainable_variables)
        state = elastic.KerasState(model, batch=0, epoch=initial_epoch)

        @elastic.run
        def train(state):
            callbacks = [_CommittedEpochs(state)]  # before the commit: the epoch is done when committed
            if options.elastic_commit_batches:
                callbacks.append(elastic.CommitStateCallback(state, options.elastic_commit_batches))
            else:
                callbacks.append(_CommitAtEpochEnd(state))
            return fit(initial_epoch=state.epoch, callbacks=callbacks)

        history = train(state)
        if history is None:  # Horovod's elastic.run returns None for a TensorFlow error it does not know
            raise BackendError(
                "training under elastic Horovod stopped on an error Horovod's elastic loop swallowed (it "
                "re-raises only errors of its own collectives); run the job without --min-np/--max-np to see it."
            )
        return history

    def own_callbacks(self, declared_states: bool = False) -> list:
        # kscale's own metric averaging: Horovod's MetricAverageCallback imports `keras` directly, which
        # is Keras 3 (not the tf.keras being trained) on TensorFlow >= 2.16.
        return [BroadcastInitialState(), AverageMetrics(self.average, self.reduce_results)]

    def user_callbacks(self, callbacks: list) -> list:
        # Without a tf.distribute strategy every rank's BackupAndRestore would write the same files:
        # all ranks restore from the backup, the chief alone writes it.
        return [
            ChiefWritesBackup(cb, self.is_chief, self.barrier)
            if isinstance(cb, tf.keras.callbacks.BackupAndRestore)
            else cb
            for cb in super().user_callbacks(callbacks)
        ]

    def reduce_results(self, model: tf.keras.Model, logs: dict) -> dict:
        """Sum every metric's state over workers (true positives, totals, counts...) and compute the results
        from the sums: exactly what one process evaluating all workers' data reports, also for AUC,
        precision or means over parts of different sizes. The states are the ones tf.distribute sums over
        replicas (each variable's own aggregation); numbers that are no metric's result are averaged."""
        return results_from_states(model, logs, self._reduced_states, self.average)

    def reduce_evaluation(self, model: tf.keras.Model, logs: dict) -> dict:
        return results_from_states(model, logs, self._reduced_states, self.average, keep_states=True)

    def _reduced_states(self, variables: list[tf.Variable], reductions: list[str]) -> list[Any]:
        """Each state over the workers as its reduction says (kscale.metric_states.reduction_of): the sums
        and means of one dtype in one allreduce (a model's metrics hold dozens of states: one collective
        per epoch end, not one each), the chief's (first) broadcast, every worker's values gathered (max,
        min)."""
        hvd_tf = _optional.horovod_tensorflow()
        reduced: list[Any] = [None] * len(variables)
        bundled = [i for i, how in enumerate(reductions) if how in ("sum", "mean")]
        for i, (variable, how) in enumerate(zip(variables, reductions)):
            name = f"kscale.metric_state.{i}"
            if how == "first":
                reduced[i] = hvd_tf.broadcast(variable.read_value(), root_rank=0, name=name)
            elif how not in ("sum", "mean"):
                rows = hvd_tf.allgather(tf.expand_dims(variable.read_value(), 0), name=name).numpy()
                reduced[i] = reduce_rows(rows, how)

        def allreduce(key: tuple[str, np.dtype], flat: np.ndarray) -> np.ndarray:
            how, dtype = key
            op = hvd_tf.Sum if how == "sum" else hvd_tf.Average
            return hvd_tf.allreduce(
                tf.constant(flat), op=op, name=f"kscale.metric_states.{how}.{dtype}"
            ).numpy()

        values = [variables[i].numpy() for i in bundled]
        keys = [(reductions[i], value.dtype) for i, value in zip(bundled, values)]
        for i, value in zip(bundled, reduce_in_groups(values, keys, allreduce)):
            reduced[i] = value
        return reduced

    def combined_metric_states(self, variables: list, reductions: list[str]) -> list[np.ndarray]:
        return [np.asarray(state) for state in self._reduced_states(variables, reductions)]

    def restore_metric_states(self, variables: list, values: list[np.ndarray], reductions: list[str]) -> None:
        """Each worker its share (metric_states.share_of), the chief's holding the combined states."""
        assign_shares(variables, values, reductions, self.is_chief)

    def predict(
        self, model: Any, method: str, keras_method: Any, arguments: dict, options: HorovodOptions
    ) -> Any:
        if method != "predict" or not options.split_predict or self.num_workers == 1:
            return keras_method(**arguments)
        x = arguments.get("x")
        if not structures.is_array_data(x):
            raise DataError(
                f"split_predict needs numpy arrays or tensors to cut into parts, got {type(x).__name__}. "
                "Pass arrays, or drop split_predict (every worker then predicts all of x)."
            )
        total = structures.num_samples(x)
        bounds = np.linspace(0, total, self.num_workers + 1).astype(int)
        start, end = bounds[self.worker_index], bounds[self.worker_index + 1]
        part = structures.map_structure(lambda a: a[start:end], x)
        local = keras_method(**{**arguments, "x": part})
        hvd_tf = _optional.horovod_tensorflow()
        leaves = tf.nest.flatten(local)
        gathered = [
            hvd_tf.allgather(tf.convert_to_tensor(leaf), name=f"kscale.predict.{i}").numpy()
            for i, leaf in enumerate(leaves)
        ]
        return tf.nest.pack_sequence_as(local, gathered)

    def broadcast(self, array: np.ndarray) -> np.ndarray:
        hvd_tf = _optional.horovod_tensorflow()
        return hvd_tf.broadcast(tf.constant(np.asarray(array)), root_rank=0, name="kscale.broadcast").numpy()

    def gather(self, values: np.ndarray) -> np.ndarray:
        hvd_tf = _optional.horovod_tensorflow()
        rows = hvd_tf.allgather(tf.constant(np.asarray(values, np.float32)[None]), name="kscale.gather")
        return rows.numpy()

    def mean_over_workers(self, values: np.ndarray) -> np.ndarray:
        hvd_tf = _optional.horovod_tensorflow()
        return hvd_tf.allreduce(tf.constant(values), op=hvd_tf.Average, name="kscale.state").numpy()

    def average(self, values: list[float]) -> list[float]:
        hvd_tf = _optional.horovod_tensorflow()
        averaged = hvd_tf.allreduce(tf.constant(values, tf.float64), op=hvd_tf.Average, name="kscale.average")
        return [float(v) for v in averaged.numpy()]

    def barrier(self) -> None:
        """Wait until every rank gets here (Horovod 0.28's TensorFlow API has no barrier)."""
        hvd_tf = _optional.horovod_tensorflow()
        hvd_tf.allreduce(tf.constant(0.0), op=hvd_tf.Sum, name="kscale.barrier")


def _sum_over_workers(tensor: tf.Tensor) -> tf.Tensor:
    """The sum of `tensor` over every worker, differentiable (the gradient is summed the same way)."""
    hvd_tf = _optional.horovod_tensorflow()
    return hvd_tf.allreduce(tensor, op=hvd_tf.Sum, name="kscale.batch_statistics")


def average_every_update(optimizer: Any) -> None:
    """Make Horovod's DistributedOptimizer average the gradients of every update, however they arrive.

    Horovod 0.28 allreduces in `compute_gradients`, which only `minimize` calls (Keras' own train_step).
    A train_step that calls `apply_gradients` itself (Keras' guide "Customizing what happens in fit()",
    a GAN) passes only through `aggregate_gradients`, the hook Keras >= 2.11 optimizers call in every
    `apply_gradients`, which Horovod leaves to Keras (a sum over this process's one replica): those
    gradients were never averaged and the workers drifted apart. Here `aggregate_gradients` averages
    them, unless they are the ones `compute_gradients` already averaged (minimize: no second allreduce).
    Bound to the object, as Keras binds `train_function`, not given as a subclass of Horovod's class as
    kscale's other optimizer classes are (kscale.subclassing): Horovod's methods call
    `super(self.__class__, self)`, which a subclass would send back into them without end. The reduction
    is Horovod's own (with its compression and local-variable rules): kscale._horovod_private.allreduce.
    """
    if not hasattr(type(optimizer), "aggregate_gradients"):  # a legacy optimizer: Horovod's own paths
        return
    cls = type(optimizer)
    # Ids of the gradients compute_gradients last returned, averaged already. minimize hands them straight
    # to apply_gradients, so each aggregate_gradients call empties it: no stale id is ever matched.
    averaged: set[int] = set()

    def compute_gradients(self: Any, loss: Any, var_list: Any, tape: Any = None) -> list:
        pairs = cls.compute_gradients(self, loss, var_list, tape)
        averaged.update(id(gradient) for gradient, _ in pairs if gradient is not None)
        return pairs

    def aggregate_gradients(self: Any, grads_and_vars: Any) -> list:
        pairs = list(grads_and_vars)
        present = [(g, v) for g, v in pairs if g is not None]
        already = all(id(g) in averaged for g, _ in present)
        averaged.clear()
        if already:
            return pairs
        if _horovod_private.accumulates_gradients(self):
            raise OptionError(
                "backward_passes_per_step > 1 accumulates the gradients that the optimizer computes "
                "(minimize, Keras' own train_step), but this train_step calls apply_gradients with "
                "gradients of its own. Drop backward_passes_per_step, or use the Keras 3 optimizer option "
                "gradient_accumulation_steps where your stack has it."
            )
        reduced = iter(_horovod_private.allreduce(self, [g for g, _ in present], [v for _, v in present]))
        return [(g if g is None else next(reduced), v) for g, v in pairs]

    instance_methods.bind(optimizer, "compute_gradients", compute_gradients)
    instance_methods.bind(optimizer, "aggregate_gradients", aggregate_gradients)


class _CommittedEpochs(tf.keras.callbacks.Callback):
    """Count finished epochs in Horovod's elastic state (Keras numbers epochs from initial_epoch already;
    Horovod's UpdateEpochStateCallback would add initial_epoch again)."""

    def __init__(self, state: Any):
        super().__init__()
        self._state = state

    def on_epoch_end(self, epoch, logs=None):
        self._state.epoch = epoch + 1


class _CommitAtEpochEnd(tf.keras.callbacks.Callback):
    """Commit the elastic state after each epoch, with no per-batch hook (Horovod's CommitStateCallback
    has one even when it commits per epoch only)."""

    def __init__(self, state: Any):
        super().__init__()
        self._state = state

    def on_epoch_end(self, epoch, logs=None):
        self._state.commit()
