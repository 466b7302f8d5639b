"""The seam every backend fits behind: devices, the model and its optimizer, data, callbacks, results, files.

`kscale.distribute()` and the methods it gives the model ask the backend for everything that differs
between ways of running; nothing outside `kscale/backends/` asks which backend it is. A backend is a way
of running (one process, a strategy, Horovod, keras.distribution); the Keras its models come from is an
object it holds, `self.family` (kscale/keras2/family.py or kscale/keras3/family.py), and what only the
model's Keras decides (rebuilding, the optimizer, feeding one process, callbacks) is asked of it.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
from collections.abc import Callable, Hashable
from typing import Any, ClassVar

import numpy as np

from kscale import checkpoint_io, feeds
from kscale.callbacks import for_this_worker
from kscale.environment import Environment
from kscale.errors import SaveError
from kscale.model_steps import Layer


def reduce_in_groups(
    values: list[np.ndarray], keys: list[Hashable], reduce: Callable[[Hashable, np.ndarray], np.ndarray]
) -> list[np.ndarray]:
    """Each value reduced over the workers with one collective per key, not one per value: the values of
    one key (a dtype; a reduction and a dtype) packed into one flat array, `reduce(key, flat)`, and
    unpacked, in each value's own shape and dtype and in the order given."""
    groups: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    reduced: list[np.ndarray] = [np.empty(0)] * len(values)
    for key, members in groups.items():
        flat = reduce(key, np.concatenate([np.asarray(values[i]).reshape(-1) for i in members]))
        parts = np.split(np.asarray(flat), np.cumsum([np.size(values[i]) for i in members])[:-1])
        for i, part in zip(members, parts):
            reduced[i] = part.reshape(np.shape(values[i])).astype(values[i].dtype)
    return reduced


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A backend without options of its own."""


class Backend(abc.ABC):
    """One way of running a Keras model on one or more replicas."""

    name: ClassVar[str]
    #: The Keras family it trains (kscale.keras2.family.Keras2Family or kscale.keras3.family.Keras3Family):
    #: each backend holds one, `self.family`, and hands itself to the methods that need it.
    Family: ClassVar[type]
    #: This backend's own `distribute()` options: a frozen dataclass that checks its values itself.
    Options: ClassVar[type] = NoOptions
    #: Created by `import kscale` under its launcher, because it must exist before the first operation.
    create_at_import: ClassVar[bool] = False
    #: Saving involves every worker (a collective inside), so all save and the others' copies are scratch.
    saves_are_collective: ClassVar[bool] = False
    #: Runs in this one process, whatever the launcher's environment says (one worker, rank 0).
    one_process: ClassVar[bool] = False
    #: Every process's batches must have the same rows (Keras 3 on JAX makes one array of them).
    equal_batches: ClassVar[bool] = False
    #: Each replica computes its loss on its own slice of the global batch, and their gradients are
    #: averaged (all but Keras 3 on JAX, whose every step computes the global batch's loss itself).
    replica_losses: ClassVar[bool] = True
    #: Workers may evaluate parts of different sizes, to the last sample: each process alone with no
    #: collective per step (Horovod, torch), or a strategy with every replica's part cut into as many
    #: non-empty batches as it runs steps; `reduce_results` combines the metric states once at the end.
    uneven_evaluation: ClassVar[bool] = True

    def __init__(self, env: Environment, devices: list[str] | None = None):
        self.env = env
        self.requested_devices = devices
        self.family = self.Family()

    # -- when it applies, and how big the world is --------------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def detect(cls, env: Environment) -> bool:
        """Whether this backend is the natural choice for this process (checked in registry order)."""

    def setup(self) -> None:
        """Initialise the runtime and pin devices; called once, before the first model."""

    def at_import(self) -> None:
        """What `import kscale` does with a backend it creates then (`create_at_import`), before the user's
        models exist: nothing here."""

    @property
    def num_workers(self) -> int:
        return 1 if self.one_process else self.env.world_size

    @property
    def worker_index(self) -> int:
        return 0 if self.one_process else self.env.rank

    @property
    def num_replicas(self) -> int:
        """Replicas in sync: the factor the global batch (and the learning rate) grows by."""
        return self.num_workers

    @property
    def replicas_per_worker(self) -> int:
        return self.num_replicas // self.num_workers

    @property
    def is_chief(self) -> bool:
        return self.worker_index == 0

    @property
    def devices(self) -> tuple[str, ...]:
        return ()

    def runs_on(self, devices: list[str]) -> bool:
        """Whether this backend replicates over exactly `devices` (as a user names them: "GPU:0")."""
        return self.requested_devices is None or list(devices) == list(self.requested_devices)

    def keras_steps(self) -> contextlib.AbstractContextManager:
        """Where Keras' fit, train_on_batch and test_on_batch run for kscale, each worker feeding its part."""
        return contextlib.nullcontext()

    def loading(self) -> contextlib.AbstractContextManager:
        """Where Keras' load_weights runs on a distributed model."""
        return contextlib.nullcontext()

    def scope(self) -> contextlib.AbstractContextManager:
        """Context in which models are built for this backend (a strategy scope, or nothing)."""
        return contextlib.nullcontext()

    def chief_only_callback_types(self) -> tuple[type, ...]:
        """Callbacks that write files or print progress: where every worker runs fit, each would write them.

        Not ModelCheckpoint: it saves through the model's own save / save_weights, which kscale binds to
        write on the chief (every worker taking part where saving is collective), so it runs everywhere and
        its state (`best`, what code after fit reads) is the same on every rank."""
        callbacks = self.family.keras_module().callbacks
        return (
            callbacks.TensorBoard,
            callbacks.CSVLogger,
            callbacks.RemoteMonitor,
            callbacks.ProgbarLogger,
        )

    def notes(self) -> list[str]:
        """What the printed plan must say about how this backend found the world (nothing, mostly)."""
        return []

    def model_notes(self, model: Any) -> list[str]:
        """What the printed plan must say about how this backend trains `model` (nothing, mostly)."""
        return []

    # -- the model ------------------------------------------------------------------------------------------
    def check_model(self, model: Any) -> None:
        """Raise a ModelError where this backend cannot train `model`, a built, compiled model of its family
        (`family.check_model`, asked first). Nothing here."""

    def place_model(self, model: Any) -> Any:
        """The model object that trains here: `model` itself, or a copy built where this backend needs it."""
        return model

    def around_steps(self, model: Any) -> Layer | None:
        """This backend's layer around the model's train_step and test_step (kscale.model_steps), or
        None."""
        return None

    @property
    def loss_replicas(self) -> int:
        """How many replicas compute a step's loss, each on its slice (kscale.loss_reduction)."""
        return self.num_replicas if self.replica_losses else 1

    def compile(self, compile_fn: Callable[..., None], optimizer: Any, args: dict, options: Any) -> None:
        """Compile with `optimizer` in the form this backend trains it."""
        compile_fn(optimizer=self.optimizer_for(optimizer, options), **args)

    def compile_in_scope(
        self, compile_fn: Callable[..., None], optimizer: Any, args: dict, options: Any
    ) -> None:
        """`compile` for a backend whose optimizer, losses and metrics must live in its scope (a strategy's,
        a keras.distribution's): compiled there, with the loss and metric objects made elsewhere (before
        `import kscale`) made anew there, and the user's own made there left theirs (`created_here`)."""
        with self.scope():
            compile_fn(
                optimizer=self.optimizer_for(optimizer, options),
                **self.family.fresh_compile_args(args, self.created_here),
            )

    def created_here(self, variable: Any) -> bool:
        """Whether `variable` was created where this backend trains (its scope, its devices): anywhere."""
        return True

    def optimizer_for(self, optimizer: Any, options: Any) -> Any:
        """The optimizer compile() gets: the user's (applying its rate scaled), and whatever this backend
        wraps it in."""
        return self.family.optimizer_for(optimizer, options)

    # -- data -------------------------------------------------------------------------------------------------
    def feed(self, x: Any, y: Any, sample_weight: Any, request: Any) -> Any:
        """This worker's part of the data, in the form the model's own fit/evaluate take (a feeds.Feed):
        here as one process takes it, the part cut as the family cuts it."""
        return feeds.one_process_feed(self.family.worker_part(x, y, sample_weight, request), request)

    def predict_batch_size(self, per_replica: int) -> int:
        """The batch predict() runs with on this worker for a per-replica batch."""
        return per_replica * self.replicas_per_worker

    # -- callbacks and results ---------------------------------------------------------------------------
    def own_callbacks(self, declared_states: bool = False) -> list:
        """Callbacks this backend itself needs during fit (broadcasting weights, averaging metrics).
        `declared_states`: the model has a metric whose states combine otherwise than as a sum
        (kscale.combine_states)."""
        return []

    def user_callbacks(self, callbacks: list) -> list:
        """The user's callbacks as this worker runs them: the same objects, or ones that forward to them.
        The chief's alone where they write; where saving is collective, the family's callbacks that save
        through collectives run everywhere; a backup the family's Keras keeps for one process only is
        shared: every process restores, the chief writes, each backup whole."""
        collective = self.saves_are_collective and self.num_workers > 1
        everywhere = self.family.collectively_saving_callbacks() if collective else ()
        callbacks = for_this_worker(callbacks, self.is_chief, self.chief_only_callback_types(), everywhere)
        callbacks = [c for cb in callbacks for c in (cb, *self.family.backup_companions(cb, self))]
        shared = self.family.backup_to_share()
        if shared is None:
            return callbacks
        from kscale.callbacks.shared_backup import SharedBackup

        return [SharedBackup(cb, self) if isinstance(cb, shared) else cb for cb in callbacks]

    def build_on_first_batch(self, model: Any, x: Any) -> None:
        """A model the family's Keras would build inside its first step (after the weights are made equal)
        is built before, in this backend's scope, from the first batch of `x`, and placed as one built
        before distribute()."""
        inputs = self.family.first_batch_inputs(model, x)
        if inputs is None:
            return
        try:
            with self.scope():
                model(inputs, training=False)
        except NotImplementedError:  # no call() (keras.io's GAN): its sub-models were built and placed
            return
        self.place_model(model)  # in the backend's scope already: the workers' weights are made equal

    def callbacks(self, user_callbacks: list, declared_states: bool = False) -> list:
        """What this worker's fit runs: the backend's own first (weights are broadcast and metrics averaged
        before anything else reads them), then the user's."""
        return self.own_callbacks(declared_states) + self.user_callbacks(user_callbacks)

    def reduce_results(self, model: Any, logs: dict) -> dict:
        """evaluate's (or *_on_batch's) numbers as one process given every worker's data would report them.

        Here the mean of the workers' numbers, which is exact where there is nothing to combine (one
        process; a tf.distribute strategy, whose metric states are summed over replicas when read).
        Backends whose workers compute alone (Horovod) combine the metric states instead. A result with one
        number per threshold or class (`Precision(thresholds=[...])`, `FBetaScore()`) is averaged number by
        number and keeps its shape.
        """
        arrays = {name: np.asarray(value) for name, value in logs.items()}
        flat = self.average([float(v) for array in arrays.values() for v in array.reshape(-1)])
        bounds = np.cumsum([0] + [array.size for array in arrays.values()])
        return {
            name: float(flat[start])
            if array.ndim == 0
            else np.reshape(flat[start:end], array.shape).astype(array.dtype)
            for (name, array), start, end in zip(arrays.items(), bounds[:-1], bounds[1:])
        }

    def evaluate(
        self, model: Any, keras_evaluate: Callable[..., dict], arguments: dict, whole: bool = False
    ) -> dict:
        """Keras' evaluate (`arguments` ask for a dict) on the user's own model and metrics: on this worker's
        part, its numbers combined over workers (`reduce_results`), or, `whole` (where this backend
        `evaluates_whole` the data), on all the data on every process."""
        if whole:
            with self.whole_data_on_every_process():  # fed whole (_request): one process's numbers
                return keras_evaluate(**arguments)
        return self.reduce_evaluation(model, keras_evaluate(**arguments))

    def reduce_evaluation(self, model: Any, logs: dict) -> dict:
        """evaluate's numbers as `reduce_results` gives them, the metrics left holding the combined states
        where the backend combines them itself (the user's metric objects then read one process's result)."""
        return self.reduce_results(model, logs)

    def evaluates_whole(self, x: Any) -> bool:
        """Whether every process evaluates all the data on the model itself (the work done N times, the
        numbers one process's): where Keras' own distributed evaluate takes only equal batches from every
        process, so that parts of other sizes would lose samples, and zero-weighted padding would count in
        the metrics that take no sample weights. Keras 3 on JAX across processes."""
        return False

    def whole_data_on_every_process(self) -> contextlib.AbstractContextManager:
        """Where a Keras call on the model computes what one process computes from data every process passes
        whole; only backends that `evaluates_whole` need it."""
        raise NotImplementedError

    def check_batch(self, arrays: list) -> None:
        """train_on_batch / test_on_batch: a ModelError or DataError where this backend cannot take the
        batch each worker passes as that worker's share of the step. Nothing here."""

    def agree_on_state(self, variables: list) -> None:
        """Give every worker the workers' mean of each of `variables`: state that each updates from its own
        batches and no gradient averaging reaches (batch normalization's moving statistics). One collective
        per dtype; nothing where one worker computes it for all."""
        if self.num_workers == 1 or not variables:
            return
        values = self.local_values(variables)
        # float64: the mean of equal values (a frozen layer's) is that value, to the last bit
        means = reduce_in_groups(
            values, [v.dtype for v in values], lambda _, flat: self.mean_over_workers(flat.astype(np.float64))
        )
        for variable, mean in zip(variables, means):
            variable.assign(mean)

    def mean_over_workers(self, values: np.ndarray) -> np.ndarray:
        """The workers' mean of `values` (the same shape everywhere), on every worker."""
        return values

    def combined_metric_states(self, variables: list, reductions: list[str]) -> list[np.ndarray]:
        """Each metric state of the job as one process holding every replica's would have it (combined as
        `reductions` say, metric_states.reduction_of), on every worker: what a backup inside an epoch
        keeps of the epoch's metrics. Here this worker's own: one worker computes them for all."""
        return self.local_values(variables)

    def restore_metric_states(self, variables: list, values: list[np.ndarray], reductions: list[str]) -> None:
        """Give the replicas `values` (combined_metric_states' of a backup) so that the job's metrics
        combine to them again and go on from there. Here: one worker holds them for all."""
        for variable, value in zip(variables, values):
            variable.assign(np.asarray(value, dtype=np.asarray(variable.numpy()).dtype))

    def local_values(self, variables: list) -> list[np.ndarray]:
        """This worker's copy of each variable's value, read without any collective."""
        return [np.asarray(v) for v in variables]

    def broadcast(self, array: np.ndarray) -> np.ndarray:
        """The chief's `array` (integers or floats, any shape) on every worker; what the others pass is
        ignored but gives the shape and dtype."""
        return np.asarray(array)

    def gather(self, values: np.ndarray) -> np.ndarray:
        """Every worker's `values` (float32, the same length everywhere), one row per worker, on every worker."""
        return np.asarray(values, np.float32)[None]

    def average(self, values: list[float]) -> list[float]:
        """Average per-worker numbers over workers, so every worker reports the same.

        Identity here: one process has nothing to average, and tf.distribute strategies already reduce
        over all replicas. Backends whose workers compute alone (Horovod) override it.
        """
        return values

    def run_fit(self, model: Any, fit: Callable[..., Any], options: Any, initial_epoch: int = 0) -> Any:
        """Run Keras' fit: `fit(initial_epoch=None, callbacks=())` plans this world and calls it once.

        Backends whose world can change while training (elastic Horovod) call it again after a change.
        """
        return fit()

    # -- files ------------------------------------------------------------------------------------------------
    def save(
        self, filepath: Any, write: Callable[[Any], None], may_be_folder: bool = True, replace: bool = True
    ) -> None:
        """Write a model or weights: the chief writes, atomically; other workers write nothing, or, where
        saving is collective, write into a scratch folder that is deleted.

        `may_be_folder=False`: `write` writes files only (weights). `replace=False`: the user asked not to
        overwrite an existing file, so Keras' own `write` must find it and decide.

        Every worker then learns whether the chief's write failed (one small gather, where a barrier was:
        no worker goes on, to load what was saved, say, before the file is there), and all stop together:
        the ones that failed with their own error, the others with a SaveError naming them. Else the chief alone would
        stop, while the others waited for it in training's next collective.
        """
        failed: BaseException | None = None
        try:
            if self.is_chief:
                checkpoint_io.atomic_save(filepath, write, may_be_folder, replace)
            elif self.saves_are_collective:
                checkpoint_io.scratch_save(filepath, write)
        except Exception as err:  # re-raised below, once every worker knows
            failed = err
        if self.num_workers > 1:
            failures = self.gather(np.asarray([float(failed is not None)], np.float32))
            failed_ranks = [rank for rank, row in enumerate(failures) if row[0]]
            if failed is None and failed_ranks:
                raise SaveError(
                    f"rank(s) {failed_ranks} could not write {filepath} (their own error says why), so "
                    "every worker stops here with them. Fix what that error names (a format the model "
                    "cannot be saved in, a folder it cannot write), and run again."
                )
        if failed is not None:
            raise failed

    def barrier(self) -> None:
        """Wait until every worker gets here (nothing to wait for in one process)."""

    def predict(
        self, model: Any, method: str, keras_method: Callable[..., Any], arguments: dict, options: Any
    ) -> Any:
        """Run predict/predict_on_batch: Keras' own, on all of `x` in every worker."""
        return keras_method(**arguments)
