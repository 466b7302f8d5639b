"""Give each worker its own slice of the input, so N workers see N different batches per step."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kscale import environment
from kscale.errors import KScaleError, OptionError

if TYPE_CHECKING:
    import tensorflow as tf


def shard_dataset(
    dataset: tf.data.Dataset, num_shards: int | None = None, index: int | None = None
) -> tf.data.Dataset:
    """`dataset.shard(num_shards, index)`, defaulting to (world size, rank); the dataset itself alone.

    Apply it right after reading the records, BEFORE shuffle and repeat: shards of a shuffled stream are
    disjoint only if every worker shuffles identically, and sharding after `repeat()` mixes epochs. Without
    sharding every worker reads the same records, and the job trains N times on the same batches.
    """
    env = environment.current()
    num_shards = env.world_size if num_shards is None else num_shards
    index = env.rank if index is None else index
    if num_shards < 1 or not 0 <= index < num_shards:
        raise OptionError(
            f"shard index must be in [0, num_shards) with num_shards >= 1, got {index} of {num_shards}."
        )
    if num_shards == 1:
        return dataset
    return dataset.shard(num_shards, index)


def sharded_input_fn(input_fn: Callable[..., tf.data.Dataset]) -> Callable[..., tf.data.Dataset]:
    """Wraps an Estimator `input_fn` so that the dataset it returns is sharded per worker.

    The wrapper has `input_fn`'s signature, so the Estimator still passes `params`, `mode` and `config`.
    It shards the FINISHED pipeline: each worker still reads every record and keeps every N-th element,
    which gives disjoint shards only if the pipeline yields the same sequence on every worker (no shuffle,
    or one seeded identically everywhere). For large or shuffled inputs call `shard_dataset` inside the
    input_fn, right after reading the files.
    """

    @functools.wraps(input_fn)
    def wrapper(*args: Any, **kwargs: Any) -> tf.data.Dataset:
        import tensorflow as tf

        dataset = input_fn(*args, **kwargs)
        if not isinstance(dataset, tf.data.Dataset):
            raise KScaleError(
                f"sharded_input_fn needs {getattr(input_fn, '__name__', 'input_fn')} to return a "
                "tf.data.Dataset, "
                f"got {type(dataset).__name__}. Return the dataset (features, labels) instead of tensors."
            )
        return shard_dataset(dataset)

    # tf.estimator reads input_fn's arguments with getfullargspec, which ignores __wrapped__ but honours
    # __signature__: without this the Estimator would pass the wrapper no params/mode/config.
    wrapper.__signature__ = inspect.signature(input_fn)  # type: ignore[attr-defined]
    return wrapper


def is_chief() -> bool:
    """Whether this worker is rank 0: the one that writes checkpoints, predictions and logs."""
    return environment.current().is_chief
