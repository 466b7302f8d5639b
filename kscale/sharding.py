"""This worker's part of the data: equal shards for training, so every worker runs the same number of steps.

The rule for training: cut the data into N equal parts (dropping at most N-1 trailing samples), give
part r to worker r. Equal parts mean equal step counts, so a collective never waits for a worker that
has run out of data. Worker r takes every N-th element starting at r: at each step the N workers
together see exactly the samples one process would see with an N-times larger batch. Of a dataset of
batches, the last step's batches are joined and cut in equal parts (`last_step`), as one process at the
global batch takes them in its last step.

Evaluation on backends without a collective per step (`Shard.even=False`) drops nothing: worker r
takes every N-th element from r to the end, and the metric states are summed over workers afterwards.

Framework-free (numpy only). This module holds the rule and its arithmetic; what a worker's part is and
how it is fed, kscale/feeds.py; datasets and generators of batches cut by it, kscale/batch_shards.py;
what depends on tf.data or a Keras dataset class, kscale/tf_data.py and the backends.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from kscale.errors import DataError
from kscale.structures import map_structure, num_samples


@dataclasses.dataclass(frozen=True)
class Shard:
    """Which part of the data this worker takes: part `index` of `count`."""

    index: int = 0
    count: int = 1
    #: Equal parts (the trailing remainder dropped); False: the parts differ by one, nothing is dropped.
    even: bool = True


def shard_arrays(structure: Any, shard: Shard, total: int | None = None) -> Any:
    """Every `shard.count`-th sample from `shard.index` of the first `total`, after cutting to a multiple of
    `count` if even."""
    if structure is None:
        return structure
    whole = num_samples(structure)
    total = whole if total is None else total
    usable = (total // shard.count) * shard.count if shard.even else total
    if shard.count == 1 and usable == whole:
        return structure
    return map_structure(lambda a: a[shard.index : usable : shard.count], structure)


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
    train = tuple(None if a is None else map_structure(lambda v: v[:cut], a) for a in arrays)
    val = tuple(None if a is None else map_structure(lambda v: v[cut:], a) for a in arrays)
    return train, val


def class_labels(y: Any) -> np.ndarray:
    """The class index of each sample, as Keras reads it for class_weight: integer labels, or the argmax
    of one-hot (or probability) rows."""
    labels = np.asarray(y)
    if labels.ndim > 1:
        labels = labels.argmax(axis=-1) if labels.shape[-1] > 1 else labels.squeeze(axis=-1)
    return np.round(labels).astype(np.int64)


def class_weighted(y: Any, sample_weight: Any, class_weight: dict) -> np.ndarray:
    """Keras' `class_weight` as sample weights (times any sample weights given), computed once on the
    whole arrays: kscale cuts the weights with the samples, so every backend applies them alike (a
    tf.distribute strategy takes no class_weight on the dataset kscale hands it)."""
    if isinstance(y, dict | list | tuple):
        raise DataError(
            "class_weight is only supported for a model with one output (as in Keras); for several outputs "
            "pass sample_weight instead."
        )
    weights = np.array([float(class_weight.get(int(c), 1.0)) for c in class_labels(y)], np.float32)
    return weights if sample_weight is None else np.asarray(sample_weight, np.float32) * weights


def slices(rows: int, parts: int) -> list[int]:
    """`rows` cut in `parts` sizes as even as they go, the larger first (they differ by at most one)."""
    small, larger = divmod(rows, parts)
    return [small + 1] * larger + [small] * (parts - larger)


def last_step(batches: int, replicas: int) -> tuple[int, int]:
    """(batches before the last step, batches of the last step) when each step takes one batch per replica.

    One process at the global batch (`replicas` times the batch) trains, in its last step, on the samples
    of exactly those last batches: shared evenly by the replicas they are that step, where one batch per
    replica would average a short batch's mean with full ones, or leave trailing batches unused."""
    steps = math.ceil(batches / replicas)
    return (steps - 1) * replicas, batches - (steps - 1) * replicas


def last_step_note(what: str, tail: int, replicas: int) -> str:
    return (
        f"the {what}'s last step: its {tail} batch(es) joined and cut in {replicas} equal parts, as one "
        f"process at the global batch trains on them (a remainder of fewer than {replicas} samples unused)"
    )


def longest_and_shortest(total: int, shard: Shard) -> tuple[int, int]:
    """The lengths of the first worker's part (the longest) and of the last one's (the shortest)."""
    first = part_length(total, dataclasses.replace(shard, index=0))
    return first, part_length(total, dataclasses.replace(shard, index=shard.count - 1))


def part_length(total: int, shard: Shard) -> int:
    """How many of `total` elements worker `shard.index` gets."""
    if shard.even:
        return total // shard.count
    return (total - shard.index + shard.count - 1) // shard.count
