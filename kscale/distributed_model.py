"""`kscale.distribute(model)`: the one line, and the model it returns.

`DistributedModel` behaves like the Keras model it wraps (attributes, summary, predict, save), and
changes what distribution changes: fit/evaluate shard the data, scale steps and epochs, keep file
writing on the chief, and run the backend's callbacks.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import tensorflow as tf

from kscale import backends, log
from kscale import learning_rate as lr_lib
from kscale.backends.base import Backend
from kscale.callbacks import AtomicModelCheckpoint, for_this_worker
from kscale.checkpoint_io import atomic_save
from kscale.data import (
    Shard,
    ShardedSequence,
    arrays_to_dataset,
    dataset_batches,
    is_array_data,
    num_samples,
    require_samples,
    sequence_to_dataset,
    shard_arrays,
    shard_dataset,
    split_validation,
    steps_for,
)
from kscale.errors import DataError, OptionError
from kscale.model_rebuild import check_model, clone_optimizer, compile_args, learning_rate_of
from kscale.plan import (
    BatchSemantics,
    DataPolicy,
    LRScaling,
    Plan,
    divide_epochs,
    divide_steps,
    lr_scale_factor,
    parse_option,
)

_KERAS_DEFAULT_BATCH = 32


@dataclasses.dataclass(frozen=True)
class Options:
    """Every choice `distribute()` makes, each overridable by the user."""

    backend: str | None = None
    devices: tuple[str, ...] | None = None
    lr_scaling: LRScaling = LRScaling.LINEAR
    warmup_epochs: float = 0.0
    data_policy: DataPolicy = DataPolicy.SHARD
    batch_semantics: BatchSemantics = BatchSemantics.PER_REPLICA
    compression: str | None = None
    backward_passes_per_step: int = 1
    print_plan: bool = True

    @classmethod
    def parse(cls, **options: Any) -> Options:
        valid = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - valid)
        if unknown:
            raise OptionError(
                f"unknown option(s) {', '.join(map(repr, unknown))} for kscale.distribute(); valid options "
                f"are {', '.join(sorted(valid))}."
            )
        parsed = dict(options)
        for name, enum_type in (
            ("lr_scaling", LRScaling),
            ("data_policy", DataPolicy),
            ("batch_semantics", BatchSemantics),
        ):
            if name in parsed:
                parsed[name] = parse_option(enum_type, parsed[name], name)
        warmup = parsed.get("warmup_epochs", 0.0)
        if not isinstance(warmup, int | float) or warmup < 0:
            raise OptionError(f"warmup_epochs={warmup!r} must be a number >= 0 (epochs of gradual warmup).")
        if parsed.get("devices") is not None:
            parsed["devices"] = tuple(parsed["devices"])
        if parsed.get("compression") == "none":
            parsed["compression"] = None
        if parsed.get("compression") not in (None, "fp16"):
            raise OptionError(f"compression={parsed['compression']!r} is not valid; use None or 'fp16'.")
        passes = parsed.get("backward_passes_per_step", 1)
        if not isinstance(passes, int) or isinstance(passes, bool) or passes < 1:
            raise OptionError(
                f"backward_passes_per_step={passes!r} must be an integer >= 1 (the number of batches whose "
                "gradients are accumulated before one allreduce)."
            )
        return cls(**parsed)


def distribute(model: tf.keras.Model, **options: Any) -> DistributedModel:
    """Make a built, compiled Keras model train on every device and worker this process can reach.

    Options (all optional): backend ('single' | 'mirrored' | 'horovod' | 'multi_worker'), devices,
    lr_scaling ('linear' | 'sqrt' | 'none'), warmup_epochs, data_policy ('shard' | 'divide_epochs' |
    'none'), batch_semantics ('per_replica' | 'global'), compression (None | 'fp16'),
    backward_passes_per_step, print_plan.
    """
    opts = Options.parse(**options)
    check_model(model)
    backend = backends.current(opts.backend, devices=list(opts.devices) if opts.devices else None)
    gradient_options = {}
    if opts.compression is not None or opts.backward_passes_per_step != 1:
        if not backend.supports_gradient_options:
            raise OptionError(
                f"compression and backward_passes_per_step are Horovod options; the {backend.name!r} backend "
                "does not support them. Drop them, or launch with horovodrun / kscale run."
            )
        gradient_options = {
            "compression": opts.compression,
            "backward_passes_per_step": opts.backward_passes_per_step,
        }
    base_lr = learning_rate_of(model.optimizer)
    factor = lr_scale_factor(opts.lr_scaling, backend.num_replicas)
    warmup = opts.warmup_epochs > 0 and factor != 1.0
    rescale = factor != 1.0 or warmup

    def make_optimizer():
        # Called inside the backend's scope, so a schedule's warmup variable is created there too.
        if backend.name == "single" and not rescale:
            return model.optimizer  # nothing to change: keep the user's own optimizer
        return clone_optimizer(
            model.optimizer, lr_lib.scaled(base_lr, factor, warmup) if rescale else base_lr
        )

    distributed = backend.prepare_model(model, make_optimizer, compile_args(model), **gradient_options)
    # The compiled optimizer's own rate: Horovod rebuilds the optimizer from its config, which makes a
    # new schedule object, and fit() must set the warmup steps on the one that is actually used.
    lr_after = learning_rate_of(distributed.optimizer)
    plan = Plan(
        backend=backend.name,
        num_workers=backend.num_workers,
        num_replicas=backend.num_replicas,
        lr_scaling=opts.lr_scaling,
        data_policy=opts.data_policy,
        batch_semantics=opts.batch_semantics,
        learning_rate_before=lr_lib.describe(base_lr),
        learning_rate_after=lr_lib.describe(lr_after),
        warmup_epochs=float(opts.warmup_epochs) if warmup else 0.0,
        devices=backend.devices,
    )
    return DistributedModel(distributed, backend, opts, plan, lr_after)


class DistributedModel:
    """A Keras model that trains distributed. Everything not overridden here is the wrapped model's."""

    _OWN = frozenset({"model", "backend", "options", "kscale_plan", "_learning_rate", "_plan_printed"})

    def __init__(self, model: tf.keras.Model, backend: Backend, options: Options, plan: Plan, lr: Any):
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "backend", backend)
        object.__setattr__(self, "options", options)
        object.__setattr__(self, "kscale_plan", plan)
        object.__setattr__(self, "_learning_rate", lr)
        object.__setattr__(self, "_plan_printed", False)

    # -- behaving like the model ---------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name in self._OWN:  # not set yet (copy, unpickling): never recurse into self.model
            raise AttributeError(name)
        return getattr(self.model, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.model, name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<kscale.DistributedModel {self.model.name!r} on {self.backend.name}, {self.backend.num_replicas} replica(s)>"

    @property
    def is_chief(self) -> bool:
        return self.backend.is_chief

    # -- training -------------------------------------------------------------------------------------
    def fit(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: int | None = None,
        epochs: int = 1,
        verbose: Any = "auto",
        callbacks: list | None = None,
        validation_split: float = 0.0,
        validation_data: Any = None,
        shuffle: bool = True,
        class_weight: Any = None,
        sample_weight: Any = None,
        initial_epoch: int = 0,
        steps_per_epoch: int | None = None,
        validation_steps: int | None = None,
        validation_batch_size: int | None = None,
        validation_freq: int = 1,
        **kwargs: Any,
    ) -> tf.keras.callbacks.History:
        """Keras' fit, with `batch_size` per replica, the data sharded and epochs/steps scaled."""
        policy = self.options.data_policy
        replicas = self.backend.num_replicas
        per_replica = self._per_replica_batch(batch_size)
        epochs_after = divide_epochs(epochs, replicas) if policy is DataPolicy.DIVIDE_EPOCHS else epochs
        if validation_split and validation_data is None and is_array_data(x):
            (x, y, sample_weight), validation_data = split_validation((x, y, sample_weight), validation_split)
            validation_split = 0.0
        feed = self._feed(x, y, sample_weight, per_replica, shuffle, steps_per_epoch, "training data")
        val_feed = None
        if validation_data is not None:
            vx, vy, vsw = _unpack_validation(validation_data)
            val_batch = (
                self._per_replica_batch(validation_batch_size) if validation_batch_size else per_replica
            )
            val_feed = self._feed(vx, vy, vsw, val_batch, False, validation_steps, "validation data")

        plan = self.kscale_plan.with_fit(
            per_replica_batch=per_replica if is_array_data(x) else None,  # else the data holds the batch
            epochs_before=epochs,
            epochs_after=epochs_after,
            steps_per_epoch_before=steps_per_epoch,
            steps_per_epoch_after=feed.epoch_steps,
            notes=tuple(feed.notes),
        )
        object.__setattr__(self, "kscale_plan", plan)
        self._print_plan_once()
        self._set_warmup(feed.epoch_steps)

        fit_kwargs = dict(kwargs)
        if feed.batch_size is not None:
            fit_kwargs["batch_size"] = feed.batch_size
        if val_feed is not None:
            fit_kwargs["validation_data"] = (
                val_feed.data
                if val_feed.y is None and val_feed.sample_weight is None
                else tuple(v for v in (val_feed.data, val_feed.y, val_feed.sample_weight) if v is not None)
            )
            fit_kwargs["validation_steps"] = val_feed.steps
            if val_feed.batch_size is not None:
                fit_kwargs["validation_batch_size"] = val_feed.batch_size
        return self.model.fit(
            feed.data,
            feed.y,
            epochs=epochs_after,
            verbose=verbose if self.is_chief else 0,
            callbacks=self._callbacks(callbacks),
            validation_split=validation_split,
            shuffle=shuffle,
            class_weight=class_weight,
            sample_weight=feed.sample_weight,
            initial_epoch=initial_epoch,
            steps_per_epoch=feed.steps,
            validation_freq=validation_freq,
            **fit_kwargs,
        )

    def evaluate(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: int | None = None,
        verbose: Any = "auto",
        sample_weight: Any = None,
        steps: int | None = None,
        callbacks: list | None = None,
        return_dict: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Keras' evaluate on each worker's shard, averaged over workers: the same numbers on every rank."""
        per_replica = self._per_replica_batch(batch_size)
        feed = self._feed(x, y, sample_weight, per_replica, False, steps, "evaluation data")
        if feed.batch_size is not None:
            kwargs["batch_size"] = feed.batch_size
        result = self.model.evaluate(
            feed.data,
            feed.y,
            verbose=verbose if self.is_chief else 0,
            sample_weight=feed.sample_weight,
            steps=feed.steps,
            callbacks=for_this_worker(callbacks or [], self.is_chief, self._multi_worker),
            return_dict=True,
            **kwargs,
        )
        names = list(result)
        averaged = dict(zip(names, self.backend.average([float(result[n]) for n in names])))
        if return_dict:
            return averaged
        values = [averaged[n] for n in names]
        return values[0] if len(values) == 1 else values

    def predict(self, x: Any, batch_size: int | None = None, verbose: Any = "auto", **kwargs: Any) -> Any:
        """Keras' predict on all of `x` on every worker (so every rank gets the full result)."""
        if batch_size is not None and self.backend.strategy is not None:
            batch_size = self._per_replica_batch(batch_size) * self.backend.replicas_per_worker
        return self.model.predict(x, batch_size=batch_size, verbose=verbose if self.is_chief else 0, **kwargs)

    # -- saving ---------------------------------------------------------------------------------------
    def save(self, filepath: str, *args: Any, **kwargs: Any) -> None:
        """Save on the chief only, atomically (multi-worker strategies save everywhere, as they must)."""
        self._save(lambda path: self.model.save(path, *args, **kwargs), filepath)

    def save_weights(self, filepath: str, *args: Any, **kwargs: Any) -> None:
        """Save weights on the chief only, atomically."""
        self._save(lambda path: self.model.save_weights(path, *args, **kwargs), filepath)

    def _save(self, save, filepath: str) -> None:
        if self._multi_worker:
            from keras.src.distribute import distributed_file_utils

            strategy = self.backend.strategy
            path = distributed_file_utils.write_filepath(str(filepath), strategy)
            atomic_save(path, save) if self.is_chief else save(path)
            distributed_file_utils.remove_temp_dir_with_filepath(path, strategy)
        elif self.is_chief:
            atomic_save(str(filepath), save)

    # -- internals ------------------------------------------------------------------------------------
    @property
    def _multi_worker(self) -> bool:
        return self.backend.strategy is not None and self.backend.num_workers > 1

    def _per_replica_batch(self, batch_size: int | None) -> int:
        if batch_size is None:
            return _KERAS_DEFAULT_BATCH
        if isinstance(batch_size, numbers.Integral) and not isinstance(batch_size, bool):
            batch_size = int(batch_size)  # numpy integers, as Keras accepts them
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise OptionError(f"batch_size={batch_size!r} must be a positive integer.")
        if self.options.batch_semantics is BatchSemantics.PER_REPLICA:
            return batch_size
        replicas = self.backend.num_replicas
        if batch_size < replicas or batch_size % replicas:
            raise DataError(
                f"global batch_size={batch_size} cannot be split evenly over {replicas} replicas; give a "
                f"multiple of {replicas} (e.g. {max(replicas, batch_size // replicas * replicas)}), or use "
                "batch_semantics='per_replica' and pass the per-replica batch."
            )
        return batch_size // replicas

    def _worker_shard(self) -> Shard:
        if self.options.data_policy is not DataPolicy.SHARD:
            return Shard()
        return Shard(self.backend.worker_index, self.backend.num_workers)

    def _feed(self, x, y, sample_weight, per_replica: int, shuffle: bool, user_steps, what: str) -> _Feed:
        """Turn the user's data into what the wrapped model's fit/evaluate should get on this worker."""
        shard = self._worker_shard()
        policy = self.options.data_policy
        replicas = self.backend.num_replicas
        steps = user_steps
        if user_steps is not None and policy is DataPolicy.SHARD:
            steps = divide_steps(user_steps, replicas, "steps_per_epoch" if "train" in what else "steps")
        notes: list[str] = []

        if is_array_data(x):
            total = num_samples(*[a for a in (x, y, sample_weight) if a is not None])
            require_samples(total, shard, per_replica, what)
            if total % shard.count:
                notes.append(
                    f"{total % shard.count} trailing sample(s) of {total} unused so workers stay even"
                )
            x, y, sample_weight = (shard_arrays(a, shard, total) for a in (x, y, sample_weight))
            local = total // shard.count
            if self.backend.strategy is None:
                available = math.ceil(local / per_replica)
                _check_steps(steps, available, what, policy)
                return _Feed(x, y, sample_weight, per_replica, steps, notes, steps or available)
            dataset = arrays_to_dataset((x, y, sample_weight), per_replica, shuffle)
            return self._distributed_feed(dataset, steps, what, notes)

        if isinstance(x, tf.data.Dataset):
            _no_separate_targets(y, sample_weight, "a tf.data.Dataset")
            batches = dataset_batches(x)
            if batches and batches > 0 and batches % shard.count:
                notes.append(
                    f"{batches % shard.count} trailing batch(es) of {batches} unused so workers stay even"
                )
            if self.backend.strategy is None:
                dataset = shard_dataset(x, shard, what)
                _check_steps(steps, dataset_batches(dataset), what, policy)
                batches = dataset_batches(dataset)
                if steps is None and batches is None and shard.count > 1:
                    raise _unknown_length(what)
                return _Feed(dataset, None, None, None, steps, notes, steps or batches)
            return self._distributed_feed(shard_dataset(x, shard, what), steps, what, notes)

        if isinstance(x, tf.keras.utils.Sequence):
            _no_separate_targets(y, sample_weight, "a keras.utils.Sequence")
            if len(x) % shard.count:
                notes.append(
                    f"{len(x) % shard.count} trailing batch(es) of {len(x)} unused so workers stay even"
                )
            if self.backend.strategy is None:
                sequence = ShardedSequence(x, shard) if shard.count > 1 else x
                _check_steps(steps, len(sequence), what, policy)
                return _Feed(sequence, None, None, None, steps, notes, steps or len(sequence))
            dataset = shard_dataset(sequence_to_dataset(x), shard, what)
            return self._distributed_feed(dataset, steps, what, notes)

        if x is None:
            raise DataError(
                f"no {what} given: pass numpy arrays, a tf.data.Dataset or a keras.utils.Sequence."
            )
        if shard.count > 1:
            raise DataError(
                f"kscale cannot split {type(x).__name__} {what} between {shard.count} workers (only numpy "
                "arrays, tf.data.Dataset and keras.utils.Sequence can be sharded). Wrap it in a "
                "tf.data.Dataset (e.g. Dataset.from_generator), or pass data_policy='none' if you already "
                "give each worker its own data."
            )
        return _Feed(x, y, sample_weight, None, steps, notes)

    def _distributed_feed(self, dataset: tf.data.Dataset, steps, what: str, notes: list[str]) -> _Feed:
        """Feed a strategy: this worker's dataset of per-replica batches, one batch per local replica."""
        per_worker = self.backend.replicas_per_worker
        batches = dataset_batches(dataset)
        available = steps_for(batches, per_worker)
        if available is not None and available < 1:
            raise DataError(
                f"the {what} has {batches} batch(es) per worker, fewer than the {per_worker} replicas of this "
                "worker: no step can run. Use a smaller batch or more data."
            )
        _check_steps(steps, available, what, self.options.data_policy)
        if steps is None:
            if available is None:
                raise _unknown_length(what)
            steps = available
            if batches % per_worker:
                notes.append(
                    f"{batches % per_worker} trailing batch(es) per epoch unused so replicas stay even"
                )
        # Keras does not restart a distributed dataset between epochs when steps are given: take
        # exactly one epoch's batches and repeat them, so every epoch is one full pass.
        epoch = dataset.take(steps * per_worker).repeat()
        distributed = self.backend.strategy.distribute_datasets_from_function(lambda _: epoch)
        return _Feed(distributed, None, None, None, steps, notes, steps)

    def _callbacks(self, user_callbacks: list | None) -> list:
        mine = for_this_worker(list(user_callbacks or []), self.is_chief, self._multi_worker)
        mine = [
            AtomicModelCheckpoint.from_checkpoint(cb)
            if isinstance(cb, tf.keras.callbacks.ModelCheckpoint)
            else cb
            for cb in mine
        ]
        # Backend callbacks first: weights are broadcast before anything else runs, and metrics are
        # averaged before checkpoints and loggers read them.
        return self.backend.callbacks() + mine

    def _set_warmup(self, steps_per_epoch: int | None) -> None:
        lr = self._learning_rate
        if not isinstance(lr, lr_lib.ScaledLearningRate) or not self.options.warmup_epochs:
            return
        if steps_per_epoch is None:
            raise DataError(
                "warmup_epochs needs to know the steps per epoch: pass steps_per_epoch to fit, or give data "
                "of known length."
            )
        lr.warmup_steps.assign(max(1, round(self.options.warmup_epochs * steps_per_epoch)))

    def _print_plan_once(self) -> None:
        if self._plan_printed or not self.options.print_plan:
            return
        object.__setattr__(self, "_plan_printed", True)
        log.chief(self.kscale_plan.describe(), self.is_chief)


@dataclasses.dataclass
class _Feed:
    data: Any
    y: Any
    sample_weight: Any
    batch_size: int | None
    steps: int | None
    notes: list[str]
    epoch_steps: int | None = None  # the steps one epoch will run, whether or not the user gave them


def _unpack_validation(validation_data: Any) -> tuple[Any, Any, Any]:
    if isinstance(validation_data, tuple | list) and 2 <= len(validation_data) <= 3:
        return (*validation_data, None)[:3]
    return validation_data, None, None


def _no_separate_targets(y: Any, sample_weight: Any, kind: str) -> None:
    if y is not None or sample_weight is not None:
        raise DataError(f"y and sample_weight must be inside {kind}, not passed separately to fit.")


def _check_steps(steps: int | None, available: int | None, what: str, policy: DataPolicy) -> None:
    """A step count the data cannot supply would end the epoch early on some worker, or hang the rest."""
    if steps is None or available is None or available < 0 or steps <= available:
        return
    raise DataError(
        f"steps_per_epoch asks each worker for {steps} steps of {what}, but with data_policy="
        f"'{policy.value}' each worker's part has only {available} batch(es). Lower steps_per_epoch, "
        "repeat() the dataset, or choose another data_policy (steps_per_epoch is counted for one replica "
        "and divided by the number of replicas under 'shard')."
    )


def _unknown_length(what: str) -> DataError:
    return DataError(
        f"the length of the {what} is unknown, so kscale cannot give every worker the same number of steps "
        "(an uneven split would leave workers waiting for each other forever). Pass steps_per_epoch "
        "(validation_steps / steps), or declare the length with "
        "dataset.apply(tf.data.experimental.assert_cardinality(n))."
    )
