"""Sharding training data so each worker trains on its own part and every worker runs the same steps.

The rule everywhere: cut the data into N equal parts (dropping at most N-1 trailing samples or
batches), give part r to worker r. Equal parts mean equal step counts, so a collective never waits
for a worker that has run out of data. Worker r takes every N-th element starting at r: at each step
the N workers together see exactly the samples one process would see with an N-times larger batch.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import tensorflow as tf

from kscale.errors import DataError


@dataclasses.dataclass(frozen=True)
class Shard:
    """Which part of the data this worker takes: part `index` of `count`."""

    index: int = 0
    count: int = 1


def is_array_data(x: Any) -> bool:
    """True for numpy arrays / tensors, or lists, tuples and dicts of them (what Keras slices itself)."""
    leaves = tf.nest.flatten(x)
    return bool(leaves) and all(isinstance(leaf, np.ndarray | tf.Tensor) for leaf in leaves)


def num_samples(*structures: Any) -> int:
    """The common first dimension of every array in `structures` (None entries are ignored)."""
    lengths = {int(leaf.shape[0]) for s in structures if s is not None for leaf in tf.nest.flatten(s)}
    if len(lengths) != 1:
        raise DataError(
            f"the arrays given to fit have different numbers of samples {sorted(lengths)}; x, y and "
            "sample_weight must have the same first dimension."
        )
    return lengths.pop()


def shard_arrays(structure: Any, shard: Shard, total: int | None = None) -> Any:
    """Every `shard.count`-th sample from `shard.index`, after cutting to a multiple of `count`."""
    if structure is None or shard.count == 1:
        return structure
    total = num_samples(structure) if total is None else total
    usable = (total // shard.count) * shard.count
    return tf.nest.map_structure(lambda a: a[shard.index : usable : shard.count], structure)


def require_samples(total: int, shard: Shard, batch_size: int, what: str = "training data") -> None:
    """Every worker must get at least one sample, or it would have no step to run."""
    if total < shard.count:
        raise DataError(
            f"the {what} has {total} sample(s), fewer than the {shard.count} workers: some worker would "
            f"get no data. Give at least {shard.count} samples (ideally {shard.count * batch_size}, one "
            "full batch each), or run on fewer workers."
        )


def split_validation(arrays: tuple, validation_split: float) -> tuple[tuple, tuple]:
    """Keras' validation_split, done before sharding: the last fraction of the samples (not shuffled)."""
    total = num_samples(*[a for a in arrays if a is not None])
    cut = int(total * (1.0 - validation_split))
    train = tuple(None if a is None else tf.nest.map_structure(lambda v: v[:cut], a) for a in arrays)
    val = tuple(None if a is None else tf.nest.map_structure(lambda v: v[cut:], a) for a in arrays)
    return train, val


def dataset_batches(dataset: tf.data.Dataset) -> int | None:
    """Number of elements (batches) of a dataset; None if TensorFlow cannot know it, -1 if infinite."""
    cardinality = int(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        return -1
    if cardinality == tf.data.UNKNOWN_CARDINALITY:
        return None
    return cardinality


def shard_dataset(dataset: tf.data.Dataset, shard: Shard, what: str = "training dataset") -> tf.data.Dataset:
    """Element r, r+N, r+2N, ... of a batched dataset, cut so every worker has the same count.

    A dataset of unknown length cannot be cut evenly: sharding it could leave one worker a batch
    short, and the others would wait for it forever at the next allreduce. Such datasets need
    `steps_per_epoch` (then every worker runs exactly that many steps) or a known cardinality.
    """
    if shard.count == 1:
        return dataset
    batches = dataset_batches(dataset)
    if batches is not None and batches >= 0:
        if batches < shard.count:
            raise DataError(
                f"the {what} has {batches} batch(es), fewer than the {shard.count} workers: some worker "
                f"would get no step. Use a smaller batch or more data (at least {shard.count} batches)."
            )
        dataset = dataset.take((batches // shard.count) * shard.count)
    return dataset.shard(shard.count, shard.index)


class ShardedSequence(tf.keras.utils.Sequence):
    """A keras Sequence restricted to batches r, r+N, ...; every worker gets len(seq) // N batches."""

    def __init__(self, sequence: tf.keras.utils.Sequence, shard: Shard):
        super().__init__()
        if len(sequence) < shard.count:
            raise DataError(
                f"the Sequence has {len(sequence)} batch(es), fewer than the {shard.count} workers: some "
                "worker would get no step. Use a smaller batch size or more data."
            )
        self.sequence = sequence
        self.shard = shard

    def __len__(self) -> int:
        return len(self.sequence) // self.shard.count

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} out of range for a shard of {len(self)} batches")
        return self.sequence[index * self.shard.count + self.shard.index]

    def on_epoch_end(self) -> None:
        self.sequence.on_epoch_end()


def sequence_to_dataset(sequence: tf.keras.utils.Sequence) -> tf.data.Dataset:
    """A Sequence as a tf.data pipeline (strategy backends feed replicas from tf.data only)."""
    first = sequence[0]
    signature = tf.nest.map_structure(
        lambda a: tf.TensorSpec(shape=(None, *np.shape(a)[1:]), dtype=tf.as_dtype(np.asarray(a).dtype)),
        tuple(first) if isinstance(first, list) else first,
    )

    def generate():
        for i in range(len(sequence)):
            item = sequence[i]
            yield tuple(item) if isinstance(item, list) else item
        sequence.on_epoch_end()

    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(sequence)))


def arrays_to_dataset(arrays: tuple, batch_size: int, shuffle: bool) -> tf.data.Dataset:
    """(x, y, sample_weight) arrays as a dataset of `batch_size` batches, reshuffled each epoch if asked."""
    present = tuple(a for a in arrays if a is not None)
    dataset = tf.data.Dataset.from_tensor_slices(present[0] if len(present) == 1 else present)
    if shuffle:
        dataset = dataset.shuffle(num_samples(*present), reshuffle_each_iteration=True)
    return dataset.batch(batch_size)


def steps_for(batches: int | None, replicas_per_step: int) -> int | None:
    """Steps one pass over `batches` takes when each step consumes `replicas_per_step` batches."""
    if batches is None or batches < 0:
        return None
    return batches // replicas_per_step


@dataclasses.dataclass(frozen=True)
class FeedRequest:
    """What fit/evaluate asked for, as one worker sees it."""

    per_replica: int  # samples per replica and step, for array input
    shuffle: bool
    steps: int | None  # steps per epoch for one replica (already divided among replicas); None: the data's
    what: str  # "training data", "validation data", ...: named in every error
    policy: str  # the data policy's name, for messages
    shard: Shard = Shard()


@dataclasses.dataclass
class WorkerPart:
    """This worker's part of the user's data, before a backend decides how it reaches Keras."""

    kind: str  # "arrays" | "dataset" | "sequence" | "other"
    x: Any
    y: Any = None
    sample_weight: Any = None
    length: int | None = None  # samples (arrays) or batches (dataset, Sequence); None if unknown
    notes: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Feed:
    """What the model's own fit/evaluate get on this worker."""

    x: Any
    y: Any = None
    sample_weight: Any = None
    batch_size: int | None = None
    steps: int | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    epoch_steps: int | None = None  # the steps one epoch will run, whether or not the user gave them


def worker_part(x: Any, y: Any, sample_weight: Any, request: FeedRequest) -> WorkerPart:
    """Cut the user's data (numpy arrays, tf.data.Dataset, keras Sequence) to this worker's equal part."""
    shard, what = request.shard, request.what
    if is_array_data(x):
        total = num_samples(*[a for a in (x, y, sample_weight) if a is not None])
        require_samples(total, shard, request.per_replica, what)
        notes = []
        if total % shard.count:
            notes.append(f"{total % shard.count} trailing sample(s) of {total} unused so workers stay even")
        x, y, sample_weight = (shard_arrays(a, shard, total) for a in (x, y, sample_weight))
        return WorkerPart("arrays", x, y, sample_weight, total // shard.count, notes)
    if isinstance(x, tf.data.Dataset):
        _no_separate_targets(y, sample_weight, "a tf.data.Dataset")
        batches = dataset_batches(x)
        notes = []
        if batches and batches > 0 and batches % shard.count:
            notes.append(
                f"{batches % shard.count} trailing batch(es) of {batches} unused so workers stay even"
            )
        sharded = shard_dataset(x, shard, what)
        return WorkerPart("dataset", sharded, length=dataset_batches(sharded), notes=notes)
    if isinstance(x, tf.keras.utils.Sequence):
        _no_separate_targets(y, sample_weight, "a keras.utils.Sequence")
        notes = []
        if len(x) % shard.count:
            notes.append(f"{len(x) % shard.count} trailing batch(es) of {len(x)} unused so workers stay even")
        sequence = ShardedSequence(x, shard) if shard.count > 1 else x
        return WorkerPart("sequence", sequence, length=len(sequence), notes=notes)
    if x is None:
        raise DataError(f"no {what} given: pass numpy arrays, a tf.data.Dataset or a keras.utils.Sequence.")
    if shard.count > 1:
        raise DataError(
            f"kscale cannot split {type(x).__name__} {what} between {shard.count} workers (only numpy "
            "arrays, tf.data.Dataset and keras.utils.Sequence can be sharded). Wrap it in a "
            "tf.data.Dataset (e.g. Dataset.from_generator), or pass data_policy='none' if you already "
            "give each worker its own data."
        )
    return WorkerPart("other", x, y, sample_weight)


def one_process_feed(part: WorkerPart, request: FeedRequest) -> Feed:
    """Feed a worker that is one replica (one process, one device): Keras slices and batches as usual."""
    steps = request.steps
    if part.kind == "arrays":
        available = math.ceil(part.length / request.per_replica)
        check_steps(steps, available, request)
        return Feed(
            part.x, part.y, part.sample_weight, request.per_replica, steps, part.notes, steps or available
        )
    if part.kind in ("dataset", "sequence"):
        known = part.length if part.length is not None and part.length >= 0 else None
        check_steps(steps, known, request)
        if steps is None and part.length is None and request.shard.count > 1:
            raise unknown_length(request.what)
        return Feed(part.x, notes=part.notes, steps=steps, epoch_steps=steps or known)
    return Feed(part.x, part.y, part.sample_weight, steps=steps, notes=part.notes)


def as_dataset(part: WorkerPart, request: FeedRequest) -> tf.data.Dataset:
    """This worker's part as a dataset of per-replica batches (what tf.distribute strategies are fed)."""
    if part.kind == "arrays":
        return arrays_to_dataset((part.x, part.y, part.sample_weight), request.per_replica, request.shuffle)
    if part.kind == "sequence":
        return sequence_to_dataset(part.x)
    return part.x


def check_steps(steps: int | None, available: int | None, request: FeedRequest) -> None:
    """A step count the data cannot supply would end the epoch early on some worker, or hang the rest."""
    if steps is None or available is None or available < 0 or steps <= available:
        return
    raise DataError(
        f"steps_per_epoch asks each worker for {steps} steps of {request.what}, but with data_policy="
        f"'{request.policy}' each worker's part has only {available} batch(es). Lower steps_per_epoch, "
        "repeat() the dataset, or choose another data_policy (steps_per_epoch is counted for one replica "
        "and divided by the number of replicas under 'shard')."
    )


def unknown_length(what: str) -> DataError:
    return DataError(
        f"the length of the {what} is unknown, so kscale cannot give every worker the same number of steps "
        "(an uneven split would leave workers waiting for each other forever). Pass steps_per_epoch "
        "(validation_steps / steps), or declare the length with "
        "dataset.apply(tf.data.experimental.assert_cardinality(n))."
    )


def _no_separate_targets(y: Any, sample_weight: Any, kind: str) -> None:
    if y is not None or sample_weight is not None:
        raise DataError(f"y and sample_weight must be inside {kind}, not passed separately to fit.")
