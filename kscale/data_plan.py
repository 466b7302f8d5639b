"""What each worker feeds to fit, evaluate and predict: its batch, its part of the data and its steps,
the epochs' sample orders as one process draws them, and the checks that every worker was given the
same data. The feeds themselves are the backend's (kscale/feeds.py, kscale/tf_data.py, kscale/tf_feeds.py)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from kscale import agreement
from kscale.errors import DataError, OptionError
from kscale.feeds import Feed, FeedRequest
from kscale.options import Options
from kscale.plan import BatchSemantics, DataPolicy, divide_steps
from kscale.sharding import Shard, class_weighted
from kscale.structures import flatten, is_array_data, num_samples

_KERAS_DEFAULT_BATCH = 32


def per_replica_batch(backend: Any, options: Options, batch_size: Any) -> int:
    """The batch one replica computes, from the batch_size the script passes (per replica, or global)."""
    if batch_size is None:
        return _KERAS_DEFAULT_BATCH
    if isinstance(batch_size, numbers.Integral) and not isinstance(batch_size, bool):
        batch_size = int(batch_size)  # numpy integers, as Keras accepts them
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise OptionError(f"batch_size={batch_size!r} must be a positive integer.")
    if options.batch_semantics is BatchSemantics.PER_REPLICA:
        return batch_size
    replicas = backend.num_replicas
    if batch_size < replicas or batch_size % replicas:
        raise DataError(
            f"global batch_size={batch_size} cannot be split evenly over {replicas} replicas; give a "
            f"multiple of {replicas} (e.g. {max(replicas, batch_size // replicas * replicas)}), or use "
            "batch_semantics='per_replica' and pass the per-replica batch."
        )
    return batch_size // replicas


def request(
    backend: Any,
    options: Options,
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
    policy = options.data_policy
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


def fed(backend: Any, request: FeedRequest, x: Any, y: Any, sample_weight: Any) -> Feed:
    """The backend's feed of this worker's part, checked to be cut from the same data on every worker."""
    _check_same_data(backend, request, x, y, sample_weight)
    feed = backend.feed(x, y, sample_weight, request)
    if feed.fingerprint and request.shard.count > 1:
        # What a feed read to begin with (a generator's first step: batch_shards.GeneratorShard) must be
        # the same on every worker, as arrays must (one small gather)
        gathered = backend.gather(agreement.data_fingerprint(feed.fingerprint))
        agreement.check_same_data(gathered, request.what)
    return feed


def feed_validation(backend: Any, options: Options, arguments: dict, per_replica: int) -> bool:
    """fit's validation_data as this worker feeds it, set in `arguments`; whether it is evaluated whole
    on every process (Backend.evaluates_whole)."""
    vx, vy, vsw = _unpack_validation(arguments["validation_data"])
    given = arguments.get("validation_batch_size")
    batch = per_replica_batch(backend, options, given) if given else per_replica
    whole = backend.evaluates_whole(vx)
    asked = request(
        backend, options, batch, False, arguments.get("validation_steps"), "validation data", True, whole
    )
    val = fed(backend, asked, vx, vy, vsw)
    parts = tuple(v for v in (val.x, val.y, val.sample_weight) if v is not None)
    arguments["validation_data"] = parts[0] if len(parts) == 1 else parts
    arguments["validation_steps"] = val.steps
    set_batch_size(arguments, "validation_batch_size", val.batch_size)
    return whole


def set_batch_size(arguments: dict, name: str, batch_size: int | None) -> None:
    """Keras takes a batch size only for array input; the data holds it otherwise."""
    if batch_size is None:
        arguments.pop(name, None)
    else:
        arguments[name] = batch_size


def epoch_orders(
    model: Any, backend: Any, request: FeedRequest, shuffle: Any, arrays: tuple
) -> tuple[np.ndarray | None, Callable[[], None] | None]:
    """Shuffled training arrays, cut among replicas: the order of the samples in each epoch, as one
    process's fit draws it. Every worker draws them through Keras' own array adapter, from the random state
    Keras draws from (so that the seeded script's orders are one process's, and every worker's random
    stream goes on as there: Keras 3 seeds each initializer from Python's `random`, and on JAX a model
    built later, load_model's too, must start alike everywhere), and the chief's draw is the one every
    worker uses (one broadcast per fit: an unseeded script's workers draw others). None
    where Keras' own shuffle serves (one replica), or no order is drawn per epoch (steps_per_epoch given:
    Keras goes on with one order across epochs). With them, what to call when fit ends, with the epochs it
    began (or None): put the random state back as one process's fit of those epochs leaves it
    (_keras_private.array_orders: EarlyStopping may end fit before its last epoch)."""
    x = arrays[0]
    if not shuffle or request.steps is not None or backend.num_replicas < 2:
        return None, None
    if request.shard.count * request.replicas_per_worker < 2:  # every worker takes all of it
        return None, None
    if isinstance(x, backend.family.keras_module().utils.Sequence):  # a PyDataset: the order of its batches
        count = math.ceil(len(x) / backend.num_replicas)  # one process's, at the global batch
        drawn, after = backend.family.batch_orders(model, count, request.epochs)
        return backend.broadcast(np.asarray(drawn, np.int64)), after
    if not is_array_data(x):
        return None, None
    count = num_samples(*[a for a in arrays if a is not None])
    global_batch = request.per_replica * backend.num_replicas
    drawn, after = backend.family.epoch_orders(model, count, global_batch, request.epochs, shuffle)
    return backend.broadcast(np.asarray(drawn, np.int64)), after


def with_class_weight(x: Any, y: Any, sample_weight: Any, class_weight: dict, arguments: dict) -> tuple:
    """Keras' class_weight turned into sample weights before kscale cuts the data (arrays, tf.data), as
    Keras itself turns it; other data keeps it for Keras."""
    if is_array_data(x) and y is not None:
        return x, y, class_weighted(y, sample_weight, class_weight)
    if type(x).__module__.startswith("tensorflow"):  # a tf.data.Dataset: TensorFlow is imported already
        from kscale import tf_feeds

        return tf_feeds.with_class_weight(x, class_weight), y, sample_weight
    arguments["class_weight"] = class_weight
    return x, y, sample_weight


def batch_arrays(arguments: dict) -> list:
    """The arrays of a *_on_batch call's x, y and sample_weight."""
    arrays: list = []
    for name in ("x", "y", "sample_weight"):
        value = arguments.get(name)
        if value is not None:
            arrays.extend(flatten(value))
    return arrays


def _check_same_data(backend: Any, request: FeedRequest, x: Any, y: Any, sample_weight: Any) -> None:
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
    elif isinstance(x, backend.family.keras_module().utils.Sequence) and len(x) > 0:
        picked = sorted({0, len(x) // 2, len(x) - 1})
        batches = [x[i] for i in picked]
        targets = [part for b in batches if isinstance(b, tuple | list) for part in b[1:] if part is not None]
        if not targets:  # inputs only (an autoencoder's): nothing that augmentation leaves alone
            return
        arrays = [np.asarray([len(x)]), *(np.asarray(a) for t in targets for a in flatten(t))]
    else:
        return
    agreement.check_same_data(backend.gather(agreement.data_fingerprint(arrays)), request.what)


def _unpack_validation(validation_data: Any) -> tuple[Any, Any, Any]:
    if isinstance(validation_data, tuple | list) and 2 <= len(validation_data) <= 3:
        return (*validation_data, None)[:3]
    return validation_data, None, None
