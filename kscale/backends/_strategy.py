"""What the tf.distribute backends share (mirrored and multi_worker, for tf.keras and for Keras 3 on
TensorFlow): build the model in the strategy's scope and feed the strategy a distributed dataset. What the
model's Keras decides (rebuilding it, fresh compile arguments, the optimizer) is asked of the backend's
family (`self.family`).
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from kscale import _keras_private, feeds, sharding, structures, tf_data, tf_feeds, tf_orders
from kscale.backends import _replica_mean
from kscale.backends.base import Backend
from kscale.callbacks.average_metrics import averaging_class
from kscale.environment import Environment, Launcher
from kscale.errors import BackendError, DataError
from kscale.metric_states import declared_reductions, log_value, reduce_rows, results_from_states, share_of
from kscale.model_steps import Layer


class StrategyBackend(Backend):
    """A backend whose replicas are driven by one `tf.distribute.Strategy` per process."""

    def __init__(self, env: Environment, devices: list[str] | None = None):
        super().__init__(env, devices)
        self._strategy: tf.distribute.Strategy | None = None
        self._process_strategy = False  # set as the process's strategy by at_import

    def at_import(self) -> None:
        """Make the strategy the process's own (tf.distribute.experimental_set_strategy) until the first
        model is distributed: every model the script builds after `import kscale` has its variables in the
        strategy from the start, so distribute() trains that very model, whatever its __init__ takes
        (keras.io's GAN and Distiller), with no copy rebuilt from its config."""
        tf.distribute.experimental_set_strategy(self.strategy)
        self._process_strategy = True

    def _release_process_strategy(self, model: Any) -> None:
        """Leave the process's strategy at the first distribute(): the script then runs outside it, as
        after `with strategy.scope():`, because inside it TensorFlow refuses what scripts do with a trained
        model (np.asarray of a variable synchronised on read, such as an optimizer's step count; calling a
        reloaded SavedModel's signature); kscale enters the scope itself where training needs it. A model
        built after that is copied into the scope (or built inside `kscale.scope()`)."""
        if self._process_strategy:
            self._process_strategy = False
            tf.distribute.experimental_set_strategy(None)
            self.family.strategy_left(self.strategy, model)

    def make_strategy(self) -> tf.distribute.Strategy:
        raise NotImplementedError

    def setup(self) -> None:
        if self._strategy is None:
            self._strategy = self.make_strategy()
            _keras_private.on_distribution_loss_scaling(
                self.family.keras_module(), _replica_mean.keras_divided_a_loss, _replica_mean.in_own_step
            )
            self.family.strategy_made(self.name)

    @property
    def strategy(self) -> tf.distribute.Strategy:
        self.setup()
        return self._strategy

    @property
    def num_replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(getattr(self.strategy.extended, "worker_devices", ()))

    def scope(self) -> contextlib.AbstractContextManager:
        return self.strategy.scope()

    def keras_steps(self) -> contextlib.AbstractContextManager:
        return self.family.strategy_steps()

    def loading(self) -> contextlib.AbstractContextManager:
        return self.family.strategy_loading()

    # -- the model: variables must live in the strategy's scope ------------------------------------------
    def check_model(self, model: Any) -> None:
        self.family.check_strategy_model(model, self.name)

    def place_model(self, model: tf.keras.Model) -> tf.keras.Model:
        placed = self._placed(model)
        self.family.strategy_placed(placed)
        return placed

    def around_steps(self, model: Any) -> Layer:
        return _replica_mean.around_steps(
            model, self.family.keras_module().Model, several_workers=self.num_workers > 1
        )

    def _placed(self, model: tf.keras.Model) -> tf.keras.Model:
        self._release_process_strategy(model)
        several = self.num_workers > 1
        # Built in the strategy: after `import kscale` (multi_worker), or inside kscale.scope()
        if getattr(model, "distribute_strategy", None) is self.strategy or self.family.adopt_into_strategy(
            model, self.strategy
        ):
            if several:
                broadcast_from_first_replica(self.strategy, _existing_weights(model))
            return model
        # The first worker's weights, agreed on before the copy is built: one collective per dtype, not
        # one per variable after it (1.0 s less to MobileNetV2's first step on 2 workers; kscale bench).
        try:
            arrays = model.get_weights()
        except ValueError:  # Keras 2, built on its first batch: no weights yet (see build_on_first_batch)
            arrays = []
        weights = first_replica_arrays(self.strategy, arrays) if several else None
        return self.family.rebuild_in(model, self.strategy, weights=weights)

    def model_notes(self, model: Any) -> list[str]:
        return self.family.strategy_model_notes(model)

    def evaluate(
        self, model: Any, keras_evaluate: Callable[..., dict], arguments: dict, whole: bool = False
    ) -> dict:
        """On the model itself, in the strategy, every replica fed at least one sample at every step
        (`_uneven_feed`), the metrics' states summed when read (Keras 3's trainer corrected, as for fit:
        each output's own loss weighed by its batch's size)."""
        with self.keras_steps():
            return self.reduce_evaluation(model, keras_evaluate(**arguments))

    def compile(self, compile_fn: Callable[..., None], optimizer: Any, args: dict, options: Any) -> None:
        self.family.check_strategy_compile(args, optimizer, options, self.name, self.num_replicas)
        self.compile_in_scope(compile_fn, optimizer, args, options)

    def created_here(self, variable: Any) -> bool:
        return self.strategy.extended.variable_created_in_scope(_backing(variable))

    def optimizer_for(self, optimizer: Any, options: Any) -> Any:
        copy = self.family.clone_optimizer(optimizer, options)
        return _replica_mean.averaging(self.family.rates.with_scaled_class(copy))

    def own_callbacks(self, declared_states: bool = False) -> list:
        """A strategy sums each metric state over its replicas when it is read: the epoch's logs are exact,
        but for a state declared to combine otherwise (kscale.combine_states), whose results are computed
        again at the epoch's last step (`reduce_results`)."""
        if not declared_states or self.num_replicas == 1:
            return []
        return [
            averaging_class(self.family.keras_module().callbacks.Callback)(
                lambda values: values, self.reduce_results
            )
        ]

    def reduce_results(self, model: Any, logs: dict) -> dict:
        return self._results(model, self.read_results(model, logs), keep_states=False)

    def reduce_evaluation(self, model: Any, logs: dict) -> dict:
        return self._results(model, self.read_results(model, logs), keep_states=True)

    def read_results(self, model: Any, logs: dict) -> dict:
        """The numbers as every worker agrees on them: the mean of the workers' (the same where metric
        states are summed over replicas when read, as a strategy reads them)."""
        return super().reduce_results(model, logs)

    def _results(self, model: Any, logs: dict, keep_states: bool) -> dict:
        """The logs, with the results of metrics whose states are declared to combine otherwise than the
        strategy does when it reads them (a maximum) computed from every replica's states."""
        declared = declared_reductions(model.metrics)
        if self.num_replicas == 1 or not any(
            how not in ("sum", "mean", "first") for how in declared.values()
        ):
            return logs
        return results_from_states(
            model, logs, self.combined_metric_states, lambda values: values, keep_states=keep_states
        )

    def combined_metric_states(self, variables: list, reductions: list[str]) -> list[np.ndarray]:
        """Each state as the strategy reads it (its aggregation over the replicas), or, declared otherwise,
        every replica's own values combined as declared (float64 rows summed over the workers: exact)."""
        out = []
        for variable, how in zip(variables, reductions):
            if how in ("sum", "mean", "first"):
                out.append(np.asarray(variable.numpy()))
                continue
            copies = self.strategy.experimental_local_results(_backing(variable))
            mine = np.stack([np.asarray(v.numpy(), np.float64) for v in copies])
            rows = np.zeros((self.num_workers, *mine.shape), np.float64)
            rows[self.worker_index] = mine
            if self.num_workers > 1:
                rows = sum_over_replicas(self.strategy, [rows], every=self.replicas_per_worker)[0]
            every = rows.reshape(-1, *mine.shape[1:])
            out.append(reduce_rows(every, how).astype(np.asarray(variable.numpy()).dtype))
        return out

    def restore_metric_states(self, variables: list, values: list[np.ndarray], reductions: list[str]) -> None:
        """Each replica's own copy set to its share (metric_states.share_of), the job's first replica's
        holding the combined states: the strategy's reading, or the declared combination, gives `values`."""
        for variable, value, how in zip(variables, values, reductions):
            for index, copy in enumerate(self.strategy.experimental_local_results(_backing(variable))):
                own = np.asarray(value, dtype=copy.dtype.as_numpy_dtype)
                copy.assign(share_of(own, how, holds_all=self.is_chief and index == 0))

    def local_values(self, variables: list) -> list[np.ndarray]:
        # This worker's first copy of each: reading a sync-on-read variable whole is a collective.
        return [self.strategy.experimental_local_results(v)[0].numpy() for v in variables]

    def broadcast(self, array: np.ndarray) -> np.ndarray:
        """Summed over the workers' first replicas as float64, every worker but the chief giving zeros:
        exact for integers below 2**53."""
        array = np.asarray(array)
        if self.num_workers == 1:
            return array
        mine = array.astype(np.float64) if self.is_chief else np.zeros(array.shape, np.float64)
        total = sum_over_replicas(self.strategy, [mine], every=self.replicas_per_worker)[0]
        return total.astype(array.dtype)

    def gather(self, values: np.ndarray) -> np.ndarray:
        """Each worker's `values` in its own row of zeros, summed over the workers' first replicas (exact:
        every other number added is 0)."""
        rows = np.zeros((self.num_workers, len(values)), np.float32)
        rows[self.worker_index] = values
        return sum_over_replicas(self.strategy, [rows], every=self.replicas_per_worker)[0]

    def mean_over_workers(self, values: np.ndarray) -> np.ndarray:
        """The workers' first replicas' `values`, summed over the workers and divided by their number."""
        total = sum_over_replicas(self.strategy, [np.asarray(values)], every=self.replicas_per_worker)[0]
        return total / np.asarray(self.num_workers, total.dtype)

    def barrier(self) -> None:
        if self.num_workers > 1:  # a one-number collective: every worker must reach it
            first_replica_arrays(self.strategy, [np.zeros(1, np.float32)])

    # -- data: this worker's part, as a distributed dataset ----------------------------------------------
    def feed(self, x: Any, y: Any, sample_weight: Any, request: feeds.FeedRequest) -> feeds.Feed:
        part = tf_data.worker_part(x, y, sample_weight, request)
        if part.kind is feeds.Kind.OTHER:
            return feeds.one_process_feed(part, request)
        if not request.shard.even and request.steps is None:
            return self._uneven_feed(x, part, request)
        dataset = tf_feeds.as_dataset(part, request)
        per_worker = self.replicas_per_worker
        batches = tf_data.dataset_batches(dataset)
        if (
            part.kind is feeds.Kind.ARRAYS and part.orders is not None
        ):  # every epoch's batches, in their orders
            batches //= len(part.orders)
        available = tf_data.steps_for(batches, per_worker)
        if available is not None and available < 1:
            raise DataError(
                f"the {request.what} has {batches} batch(es) per worker, fewer than the {per_worker} replicas "
                "of this worker: no step can run. Use a smaller batch or more data."
            )
        steps, notes = feeds.checked_steps(request.steps, available, request), list(part.notes)
        if steps is None:
            if available is None:
                raise feeds.unknown_length(request.what)
            steps = available
            if batches % per_worker:
                notes.append(
                    f"{batches % per_worker} trailing batch(es) per epoch unused so replicas stay even"
                )
        stream, after_training = self._epochs(x, dataset, batches, steps, available, request, notes)
        distributed = self.strategy.distribute_datasets_from_function(lambda _: stream)
        return feeds.Feed(
            distributed,
            steps=steps,
            notes=notes,
            epoch_steps=steps,
            after_training=after_training,
            after_error=(lambda: tf_orders.cut_short(x)) if after_training is not None else None,
            fingerprint=part.fingerprint,
        )

    def _epochs(
        self,
        x: Any,
        dataset: tf.data.Dataset,
        batches: int | None,
        steps: int,
        available: int | None,
        request: feeds.FeedRequest,
        notes: list[str],
    ) -> tuple[tf.data.Dataset, Callable[[], None] | None]:
        """All of fit's epochs as one stream (Keras makes one iterator of a distributed dataset, for every
        epoch, where steps are given), and what to do when training ends.

        A tf.data dataset the user passed is read in the orders one process's fit reads it: each epoch a
        new pass, after as many unread iterators of it as Keras' fit makes (a seeded shuffle that
        reshuffles draws an order for each); an endless one (repeat()) as one iterator, going on from
        epoch to epoch. Other data (arrays, Sequences) orders itself: one epoch's batches, repeated."""
        per_epoch = steps * self.replicas_per_worker
        ordered_arrays = request.orders is not None and structures.is_array_data(x)
        if ordered_arrays and steps == available:  # all of fit's epochs already, in one process's orders
            return dataset, None
        user_dataset = isinstance(x, tf.data.Dataset) and not request.evaluation
        if user_dataset and batches is not None and batches < 0:
            return dataset, None
        if user_dataset and steps == available:
            tf_orders.check_not_cut_short(x)
            iterators = self.family.fit_iterators
            passes = tf_orders.epochs_in_one_process_order(
                dataset.take(per_epoch), x, request.epochs, iterators
            )
            return passes, lambda: tf_orders.after_last_epoch(x, iterators)
        if request.evaluation:
            # One pass per evaluation: Keras makes a new iterator for each, and a repeat() read ahead by the
            # strategy's prefetch would take batches a generator (or a Sequence) then never gives again.
            return tf_orders.of_unknown_length(dataset.take(per_epoch)), None
        if user_dataset:
            notes.append(
                f"steps_per_epoch takes {steps} of the {available} steps of this worker's part of the "
                f"{request.what}: each epoch starts a new pass over it, where one process goes on with "
                "the pass it began"
            )
        # Keras does not restart a distributed dataset between epochs when steps are given: take
        # exactly one epoch's batches and repeat them, so every epoch is one full pass.
        return dataset.take(per_epoch).repeat(), None

    def _uneven_feed(self, x: Any, part: feeds.WorkerPart, request: feeds.FeedRequest) -> feeds.Feed:
        """Evaluation to the last sample: every replica runs the same number of steps, and no replica is
        ever handed a batch of zero samples (TensorFlow's CPU kernels mishandle them: oneDNN's conv2d and
        matmul fail on an empty batch). Array parts are cut into exactly steps × replicas batches of even
        sizes; a worker with one batch fewer cuts its first batches in two. Metric states are summed over
        replicas when read, and Keras weighs each batch's loss by its size, so the results are exact."""
        longest, shortest, per_worker = part.longest, part.shortest, self.replicas_per_worker
        if longest is None or shortest is None or part.length is None:
            raise feeds.unknown_length(request.what)
        notes = list(part.notes)
        if part.kind is feeds.Kind.ARRAYS:
            # As many steps as the largest part needs at the asked batch, but no more than the smallest
            # part can fill with one sample per replica and step (only a tiny part or batch runs short).
            steps = min(math.ceil(longest / (per_worker * request.per_replica)), shortest // per_worker)
            if steps < 1:
                raise DataError(
                    f"the {request.what} has {shortest} sample(s) on some worker, fewer than its "
                    f"{per_worker} replicas: a replica would get no sample. Give at least "
                    f"{per_worker * request.shard.count} samples, or evaluate on fewer replicas."
                )
            sizes = sharding.slices(part.length, steps * per_worker)
            arrays = (part.x, part.y, part.sample_weight)
            dataset = tf_feeds.arrays_in_batches(arrays, sizes)
            if max(sizes) > request.per_replica:
                notes.append(
                    f"{request.what} evaluated in batches of up to {max(sizes)} samples (more than "
                    f"{request.per_replica}), so that every replica has a sample at every step"
                )
        else:
            steps = math.ceil(longest / per_worker)
            extra = steps * per_worker - part.length
            if extra > part.length:
                raise DataError(
                    f"the {request.what} gives this worker {part.length} batch(es) for {per_worker} replicas "
                    f"and {steps} step(s): a replica would get no sample. Use smaller batches (at least "
                    f"{per_worker * request.shard.count} batches in all), or evaluate on fewer replicas."
                )
            dataset = tf_feeds.split_first_batches(tf_feeds.as_dataset(part, request), extra)
        # One pass per evaluation (Keras makes a new iterator for each), none begun ahead of the next: a
        # repeat() read ahead by each worker's prefetch, as far as its timing goes, would have the workers
        # cut different orders of a reshuffling shuffle() into their parts.
        if isinstance(x, tf.data.Dataset):  # drawing the orders one process draws
            dataset = tf_orders.epochs_in_one_process_order(dataset, x, 1, self.family.fit_iterators)
        dataset = tf_orders.of_unknown_length(dataset)
        distributed = self.strategy.distribute_datasets_from_function(lambda _: dataset)
        return feeds.Feed(
            distributed, steps=steps, notes=notes, epoch_steps=steps, fingerprint=part.fingerprint
        )


class MultiWorker(StrategyBackend):
    """`tf.distribute.MultiWorkerMirroredStrategy` across the processes TF_CONFIG (or SLURM) names, one or
    more devices each (the same for tf.keras and Keras 3 on TensorFlow)."""

    create_at_import = True  # TensorFlow accepts MultiWorkerMirroredStrategy only before its first op
    # Saving reads variables that are synchronised on read, a collective: every worker saves, as
    # TensorFlow requires; the chief's copy is kept, the others are written to scratch and deleted.
    saves_are_collective = True

    @classmethod
    def detect(cls, env: Environment) -> bool:
        return env.launcher in (Launcher.TF_CONFIG, Launcher.SLURM) and env.world_size > 1

    def read_results(self, model: Any, logs: dict) -> dict:
        """The metrics' results read from their states (summed over every replica of every worker when read
        outside a replica), not the step's returned numbers: Keras 2 sums those over workers as well
        ("auto" reduction is "sum" under MultiWorkerMirroredStrategy), which makes *_on_batch report N times
        the loss and a precision above 1."""
        results = model.get_metrics_result()
        return {name: log_value(results[name]) if name in results else logs[name] for name in logs}

    def make_strategy(self) -> tf.distribute.Strategy:
        resolver = None
        if self.env.launcher is Launcher.SLURM:
            # TensorFlow's own resolver turns SLURM's node list into a cluster spec.
            resolver = tf.distribute.cluster_resolver.SlurmClusterResolver()
        try:
            return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
        except RuntimeError as err:
            if "program startup" not in str(err):
                raise
            raise BackendError(
                "TensorFlow's MultiWorkerMirroredStrategy must be created before TensorFlow runs its first "
                "operation, but a model or tensor already exists in this process. Put `import kscale` at "
                "the top of your script, before building the model: kscale then sets the strategy up at "
                "import time (it does so whenever TF_CONFIG names several workers)."
            ) from err


class OneHostMirrored(StrategyBackend):
    """`tf.distribute.MirroredStrategy` over this process's devices (the same for tf.keras and Keras 3)."""

    one_process = True
    # Made at `import kscale` when the script imported TensorFlow first (backends.startup): models built
    # after it are built in the strategy, so a model whose __init__ takes models trains as it is.
    create_at_import = True

    @classmethod
    def detect(cls, env: Environment) -> bool:
        return env.launcher is Launcher.NONE and len(tf.config.list_physical_devices("GPU")) > 1

    def at_import(self) -> None:
        if self._strategy is None:
            # Making the strategy starts TensorFlow's runtime, after which a GPU's memory growth can no
            # longer change: turn it on first, so that the scripts that turn it on after `import kscale`
            # (TensorFlow's and Horovod's guides) still run (setting it to what it is is allowed).
            for gpu in tf.config.list_physical_devices("GPU"):
                tf.config.experimental.set_memory_growth(gpu, True)
        super().at_import()

    def make_strategy(self) -> tf.distribute.Strategy:
        devices = self.requested_devices
        if devices is None and not tf.config.list_physical_devices("GPU"):
            # No GPU: the logical CPUs the script split the CPU into (tests and CPU-only trials)
            cpus = tf.config.list_logical_devices("CPU")
            devices = [cpu.name for cpu in cpus] if len(cpus) > 1 else None
        return tf.distribute.MirroredStrategy(devices=devices)

    def runs_on(self, devices: list[str]) -> bool:
        def named(name: str) -> tuple[str, int]:
            spec = tf.DeviceSpec.from_string(name if "/" in name or ":" not in name else f"/device:{name}")
            return (spec.device_type or "").upper(), spec.device_index or 0

        return sorted(map(named, devices)) == sorted(map(named, self.devices))

    def notes(self) -> list[str]:
        if self.num_replicas > 1:
            return []
        return [
            f"MirroredStrategy has one device ({', '.join(self.devices) or 'the CPU'}), so nothing is "
            "replicated: make the GPUs visible (CUDA_VISIBLE_DEVICES), or pass devices=[...]; on CPU, split it "
            "into logical devices with tf.config.set_logical_device_configuration before `import kscale`"
        ]


def _backing(variable: Any) -> tf.Variable:
    """The TensorFlow variable behind `variable`: itself (tf.keras), or a Keras 3 variable's `value`."""
    return variable if isinstance(variable, tf.Variable) else variable.value


def _existing_weights(model: Any) -> list:
    """The model's weights, none for a tf.keras model built on its first batch (not built yet)."""
    try:
        return list(model.weights)
    except ValueError:
        return []


def broadcast_from_first_replica(strategy: tf.distribute.Strategy, variables: list[Any]) -> None:
    """Give every worker's floating-point variables the first worker's values (tf.keras' variables, or
    Keras 3's, which hold a tf.Variable as `.value` and name their dtype as a string)."""
    variables = [v for v in variables if hasattr(v, "shape")]  # not a lookup layer's table handler
    backing = [v if isinstance(v, tf.Variable) else v.value for v in variables]
    floats = [(v, b) for v, b in zip(variables, backing) if tf.as_dtype(b.dtype).is_floating]
    # This worker's first copy of each variable: reading a sync-on-read variable (batch norm's moving
    # statistics) as a whole would reduce it over all replicas.
    local = [strategy.experimental_local_results(b)[0].numpy() for _, b in floats]
    for (variable, _), value in zip(floats, first_replica_arrays(strategy, local)):
        variable.assign(value)


def first_replica_arrays(strategy: tf.distribute.Strategy, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The first replica's floating-point `arrays` on every worker (the others are returned as they are):
    each dtype's arrays packed into one tensor and summed over replicas, all but the first giving zeros."""
    arrays = [np.asarray(a) for a in arrays]
    out = list(arrays)
    by_dtype: dict[np.dtype, list[int]] = {}
    for i, array in enumerate(arrays):
        if tf.as_dtype(array.dtype).is_floating:  # bfloat16 too, which numpy does not count as a float
            by_dtype.setdefault(array.dtype, []).append(i)

    groups = list(by_dtype.values())
    packed = [np.concatenate([arrays[i].reshape(-1) for i in indices]) for indices in groups]
    sums = sum_over_replicas(strategy, packed, every=strategy.num_replicas_in_sync)  # replica 0 alone
    for indices, flat in zip(groups, sums):
        ends = np.cumsum([arrays[i].size for i in indices])
        for i, part in zip(indices, np.split(flat, ends[:-1])):
            out[i] = part.reshape(arrays[i].shape)
    return out


def sum_over_replicas(
    strategy: tf.distribute.Strategy, arrays: list[np.ndarray], every: int
) -> list[np.ndarray]:
    """Each array summed over replicas 0, every, 2·every, ... (the first of each worker when `every` is the
    replicas per worker), the others giving zeros; as this worker's first replica reads the sum."""
    summed = _summing(strategy, every)
    return [summed(tf.constant(a)).numpy() for a in arrays]


#: One traced function per strategy and `every`, kept while the strategy lives: a collective run eagerly,
#: or from a function traced anew, takes about a second under MultiWorkerMirroredStrategy on TensorFlow
#: 2.21 (2 ms once traced; TensorFlow 2.15 takes 20 ms either way).
_SUMMING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _summing(strategy: tf.distribute.Strategy, every: int) -> Callable[[tf.Tensor], tf.Tensor]:
    functions = _SUMMING.setdefault(strategy, {})
    if every not in functions:

        def summed_in_replica(value: tf.Tensor) -> tf.Tensor:
            context = tf.distribute.get_replica_context()
            kept = tf.equal(context.replica_id_in_sync_group % every, 0)
            # where, not a product: a NaN in another worker's weights must not reach the sum
            return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.where(kept, value, tf.zeros_like(value)))

        @tf.function(reduce_retracing=True)  # traced once per dtype (and shape, until shapes vary)
        def summed(value: tf.Tensor) -> tf.Tensor:
            return strategy.experimental_local_results(strategy.run(summed_in_replica, args=(value,)))[0]

        functions[every] = summed
    return functions[every]
