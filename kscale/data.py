"""Sharding training data so each worker trains on its own part and every worker runs the same steps.

The rule everywhere: cut the data into N equal parts (dropping at most N-1 trailing samples or
batches), give part r to worker r. Equal parts mean equal step counts, so a collective never waits
for a worker that has run out of data. Worker r takes every N-th element starting at r: at each step
the N workers together see exactly the samples one process would see with an N-times larger batch.
"""

from __future__ import annotations

import dataclasses
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
