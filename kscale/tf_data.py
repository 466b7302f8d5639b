"""tf.data datasets and tf.keras Sequences cut into equal shards (kscale.sharding's rule): TensorFlow's input
pipeline, for every backend that trains on TensorFlow (tf.keras, and Keras 3's tf.data inputs on TensorFlow).
A worker's part as the tf.data pipeline a strategy reads: kscale/tf_feeds.py; a reshuffling dataset read
in one process's orders across fit's epochs: kscale/tf_orders.py."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import tensorflow as tf

from kscale import _tensorflow_private
from kscale._tensorflow_private import batched_samples
from kscale.batch_shards import BatchShard, batches_part, no_separate_targets, other_part
from kscale.errors import DataError
from kscale.feeds import FeedRequest, Kind, WorkerPart, array_part
from kscale.sharding import Shard, last_step, last_step_note, longest_and_shortest, part_length
from kscale.structures import is_array_data, map_structure

AutoShardPolicy = tf.data.experimental.AutoShardPolicy
#: The policies under which kscale shards by file when it can, as tf.distribute's AUTO does.
_FILE_WHERE_POSSIBLE = (AutoShardPolicy.AUTO, AutoShardPolicy.HINT)


def first_inputs(x: Any) -> Any:
    """The model's inputs of the first batch of `x` (arrays: the first sample; a tf.data.Dataset or a
    keras Sequence: its first batch), to build a model on; None for data that cannot be read without
    consuming it (a generator)."""
    if is_array_data(x):
        return map_structure(lambda array: np.asarray(array)[:1], x)
    if isinstance(x, tf.data.Dataset) and all(
        isinstance(spec, tf.TensorSpec) for spec in tf.nest.flatten(x.element_spec)
    ):
        # Zeros of its element's shapes: an iterator made to read its first batch would draw an order of
        # a seeded shuffle() in it that one process, building on its first step, never draws.
        element = tf.nest.map_structure(_zeros_like_spec, x.element_spec)
    elif isinstance(x, tf.data.Dataset):
        element = next(iter(x.take(1)))
    elif isinstance(x, tf.keras.utils.Sequence):
        element = x[0]
    else:
        return None
    return tf.keras.utils.unpack_x_y_sample_weight(element)[0]


def _zeros_like_spec(spec: tf.TensorSpec) -> tf.Tensor:
    """A batch of one element (or the spec's sizes) of zeros, or of empty strings, as `spec` describes."""
    shape = [1 if size is None else size for size in spec.shape]
    return tf.fill(shape, tf.constant("" if spec.dtype == tf.string else 0, spec.dtype))


def dataset_batches(dataset: tf.data.Dataset) -> int | None:
    """Number of elements (batches) of a dataset; None if TensorFlow cannot know it, -1 if infinite."""
    cardinality = int(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        return -1
    if cardinality == tf.data.UNKNOWN_CARDINALITY:
        return None
    return cardinality


def shard_dataset(
    dataset: tf.data.Dataset,
    shard: Shard,
    what: str = "training dataset",
    items_per_worker: int = 1,
    share_last: bool | None = None,
) -> tf.data.Dataset:
    """Element r, r+N, r+2N, ... of a batched dataset, cut so every worker has the same count; the last
    step's batches shared evenly (`items_per_worker` parts for each worker: one per replica where a
    strategy pulls a batch per replica) where that is sure to give each part a sample
    (`shares_last_step`), as one process at the global batch trains on them.

    A dataset of unknown length cannot be cut evenly: sharding it could leave one worker a batch
    short, and the others would wait for it forever at the next allreduce. Such datasets need
    `steps_per_epoch` (then every worker runs exactly that many steps) or a known cardinality.
    `share_last`: `shares_last_step`'s answer where the caller has it already (its plan says it).
    """
    batches = dataset_batches(dataset)
    if shard.count > 1 and batches is not None and 0 <= batches < shard.count:
        raise DataError(
            f"the {what} has {batches} batch(es), fewer than the {shard.count} workers: some worker "
            f"would get no step. Use a smaller batch or more data (at least {shard.count} batches)."
        )
    if share_last is None:
        share_last = shard.even and shares_last_step(dataset, batches, shard.count * items_per_worker)
    if share_last:
        return _last_step_shared(dataset, batches, shard, items_per_worker)
    if shard.count == 1:
        return dataset
    if batches is not None and batches >= 0 and shard.even:
        dataset = dataset.take((batches // shard.count) * shard.count)
    return dataset.shard(shard.count, shard.index)


def shares_last_step(dataset: tf.data.Dataset, batches: int | None, replicas: int) -> bool:
    """Whether the last step's batches are to be cut in `replicas` equal slices: dense batches of a size
    known only when read (`batch()` keeps the remainder as a short last batch, which one process at the
    global batch also trains on), none empty: as many batches as replicas, or fewer whose samples, known
    from the `batch()` they come from, suffice. A static batch size is `drop_remainder=True`'s: one
    process at the global batch would drop the trailing batches too, and they stay unused."""
    specs = tf.nest.flatten(dataset.element_spec)
    if replicas < 2 or batches is None or batches < 1:
        return False
    if not all(isinstance(s, tf.TensorSpec) and s.shape.rank for s in specs):
        return False
    if None not in {s.shape[0] for s in specs}:
        return False
    tail = last_step(batches, replicas)[1]
    if tail >= replicas:
        return True
    batched = batched_samples(dataset)
    if batched is None or math.ceil(batched[1] / batched[0]) != batches:
        return False
    size, samples = batched
    return samples - (batches - tail) * size >= replicas


def _last_step_shared(
    dataset: tf.data.Dataset, batches: int, shard: Shard, items_per_worker: int
) -> tf.data.Dataset:
    """This worker's batches of the first steps (r, r+N, ...), then its replicas' equal slices of the last
    step's samples: one pass over the dataset (a second one, through skip(), would run its map functions
    again), the last step's batches joined as they arrive."""
    replicas = shard.count * items_per_worker
    head, _ = last_step(batches, replicas)
    empty = tf.nest.map_structure(
        lambda s: tf.zeros([0, *(d or 0 for d in s.shape[1:])], s.dtype), dataset.element_spec
    )

    def join(joined: Any, item: tuple) -> tuple:
        index, element = item
        first, last = tf.equal(index, head), tf.equal(index, batches - 1)
        joined = tf.nest.map_structure(
            lambda j, e: tf.cond(
                index < head, lambda: j, lambda: tf.cond(first, lambda: e, lambda: _concatenated(j, e))
            ),
            joined,
            element,
        )
        mine = tf.logical_and(index < head, tf.equal(index % shard.count, shard.index))
        out = tf.nest.map_structure(lambda j, e: tf.cond(last, lambda: j, lambda: e), joined, element)
        return joined, (tf.logical_or(mine, last), last, out)

    def as_rows(keep: tf.Tensor, last: tf.Tensor, element: Any) -> Any:
        def slices() -> Any:
            samples = tf.shape(tf.nest.flatten(element)[0], out_type=tf.int64)[0]
            check = tf.debugging.assert_greater_equal(
                samples,
                tf.constant(replicas, tf.int64),
                message=f"kscale: the last step has fewer samples than the {replicas} replicas",
            )
            with tf.control_dependencies([check]):
                each = samples // replicas
            first = shard.index * items_per_worker
            return tf.nest.map_structure(
                lambda t: tf.reshape(
                    t[: each * replicas], tf.concat([[replicas, each], tf.shape(t, out_type=tf.int64)[1:]], 0)
                )[first : first + items_per_worker],
                element,
            )

        return tf.cond(last, slices, lambda: tf.nest.map_structure(lambda t: t[None], element))

    shared = (
        dataset.enumerate().scan(empty, join).filter(lambda keep, last, element: keep).map(as_rows).unbatch()
    )
    steps = head // replicas + 1
    return shared.apply(tf.data.experimental.assert_cardinality(steps * items_per_worker))


def _order_fingerprint(dataset: tf.data.Dataset, what: str) -> list[np.ndarray] | None:
    """What the workers compare before cutting a dataset by batch (worker r takes batches r, r+N, ... of
    the order it reads, so every worker must read the same orders): its shuffles' seeds. A shuffle without
    one draws its own order on every worker: a DataError."""
    seeds = _tensorflow_private.dataset_shuffle_seeds(dataset)
    if seeds is None:
        return None
    if (0, 0) in seeds:
        raise DataError(
            f"the {what} has a shuffle() without a seed, which draws its own order on every worker: kscale "
            "gives worker r the batches r, r+N, ... of the order it reads, so the workers' parts would "
            "overlap and miss samples. Seed it alike on every worker (shuffle(n, seed=...), or "
            "tf.keras.utils.set_random_seed(...) before building it), shard it yourself and pass "
            "data_policy='none', or read it from files (TFRecordDataset): each worker then reads its own."
        )
    return [np.asarray([-1 if value is None else value for pair in seeds for value in pair], np.int64)]


def shard_by_file(dataset: tf.data.Dataset, shard: Shard) -> tf.data.Dataset:
    """This worker's files only: TensorFlow's own rewrite (AutoShardPolicy.FILE, as tf.distribute applies
    it) puts the shard on the list of files, so a worker reads and decodes 1/N of them, not all."""
    flat = tf.nest.flatten(dataset.element_spec)
    variant = tf.raw_ops.AutoShardDataset(
        input_dataset=tf.data.experimental.to_variant(dataset),
        num_workers=shard.count,
        index=shard.index,
        auto_shard_policy=int(tf.data.experimental.AutoShardPolicy.FILE),
        num_replicas=shard.count,
        output_types=[spec.dtype for spec in flat],
        output_shapes=[spec.shape for spec in flat],
    )
    return tf.data.experimental.from_variant(variant, dataset.element_spec)


class ShardedSequence(BatchShard, tf.keras.utils.Sequence):
    """A keras Sequence restricted to batches r, r+N, ... (kscale.batch_shards.BatchShard)."""

    noun = "Sequence"
    type_name = "a keras.utils.Sequence"


def steps_for(batches: int | None, replicas_per_step: int) -> int | None:
    """Steps one pass over `batches` takes when each step consumes `replicas_per_step` batches."""
    if batches is None or batches < 0:
        return None
    return batches // replicas_per_step


def _concatenated(first: tf.Tensor, second: tf.Tensor) -> tf.Tensor:
    """Two batches as one, each padded with zeros (or empty strings) to their common shape: padded_batch()'s
    batches differ in length, and one process at the global batch pads them all to the longest."""
    if first.shape.rank < 2 or first.shape[1:].is_fully_defined():
        return tf.concat([first, second], 0)
    common = tf.maximum(tf.shape(first)[1:], tf.shape(second)[1:])

    def padded(t: tf.Tensor) -> tf.Tensor:
        return tf.pad(
            t, tf.concat([[[0, 0]], tf.stack([tf.zeros_like(common), common - tf.shape(t)[1:]], 1)], 0)
        )

    return tf.concat([padded(first), padded(second)], 0)


def steps_joined(dataset: tf.data.Dataset, per_step: int) -> tf.data.Dataset:
    """A worker's batches, `per_step` a step (shard_dataset's), as one batch a step: for a Keras that
    spreads a worker's batch over its devices (Keras 3 on JAX). Read once, in order (a reshuffling dataset
    keeps its order); each step's batches have the same rows (full ones, or the last step's equal parts),
    other dimensions padded to the longest (zeros, empty strings), as one process's padded_batch pads them."""

    def join(*components: tf.Tensor) -> Any:
        merged = [tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0)) for t in components]
        for tensor, component in zip(merged, components):
            rows = None if component.shape[1] is None else component.shape[0] * component.shape[1]
            tensor.set_shape(tf.TensorShape([rows]).concatenate(component.shape[2:]))
        return tf.nest.pack_sequence_as(dataset.element_spec, merged)

    grouped = dataset.padded_batch(per_step, drop_remainder=True)  # a partial step is never taken
    return grouped.map(lambda *element: join(*tf.nest.flatten(element)))


def worker_part(
    x: Any, y: Any, sample_weight: Any, request: FeedRequest, replicas_per_item: int = 1
) -> WorkerPart:
    """Cut the user's data (numpy arrays, tf.data.Dataset, keras Sequence) to this worker's equal part, in
    batches of `replicas_per_item` replicas each (1 where a strategy pulls one batch per replica; all of
    the worker's where Keras takes the worker's whole batch)."""
    shard, what = request.shard, request.what
    items = max(1, request.replicas_per_worker // replicas_per_item)
    if is_array_data(x):
        return array_part(x, y, sample_weight, request)
    if isinstance(x, tf.data.Dataset):
        no_separate_targets(y, sample_weight, "a tf.data.Dataset")
        batches = dataset_batches(x)
        notes = []
        if batches is None and request.steps is None and (shard.count > 1 or request.replicas_per_worker > 1):
            # File readers (TFRecordDataset, interleave) do not know their length, and the replicas must
            # run the same steps: count the batches once, as one process's Keras finds them by reading.
            batches = int(x.reduce(np.int64(0), lambda count, _: count + 1))
            x = x.apply(tf.data.experimental.assert_cardinality(batches))
            notes.append(
                f"the {what}'s length was unknown: counted by reading it once ({batches} batches), which "
                "draws an order of a shuffle() in it that one process does not draw; pass steps "
                "(steps_per_epoch, validation_steps) or assert_cardinality(n) to skip that pass"
            )
        policy = x.options().experimental_distribute.auto_shard_policy
        if shard.count > 1 and policy == AutoShardPolicy.OFF:  # the user shards it (or wants it whole)
            notes.append(
                "input not sharded (the dataset's auto_shard_policy is OFF): each worker reads all of it"
            )
            return WorkerPart(Kind.DATASET, x, length=batches, notes=notes, longest=batches, shortest=batches)
        # Of unknown or infinite length (file readers are; repeat() is), there is no equal cut to keep:
        # each worker reads its own files where it can (steps_per_epoch keeps the workers in step).
        endless = batches is None or batches < 0
        by_file = policy == AutoShardPolicy.FILE or (policy in _FILE_WHERE_POSSIBLE and endless)
        files = _tensorflow_private.dataset_files_read(x) if shard.count > 1 and by_file else None
        dense = all(isinstance(spec, tf.TensorSpec) for spec in tf.nest.flatten(x.element_spec))
        if (
            shard.count > 1
            and policy == AutoShardPolicy.FILE
            and (files is None or files < shard.count or not dense)
        ):
            raise DataError(
                f"the {what}'s auto_shard_policy is FILE, but it reads {files or 'no list of'} file(s)"
                f"{'' if dense else ' (and yields ragged or sparse tensors)'} for {shard.count} workers: give "
                "it at least one file per worker (tf.data.Dataset.list_files, TFRecordDataset of a list), or "
                "set the policy to DATA (every worker reads all of it and keeps its batches)."
            )
        if files is not None and files >= shard.count and dense:
            notes.append(
                f"input sharded by file: this worker reads {part_length(files, replace(shard, even=False))} "
                f"of the {files} files (tf.data's AutoShardPolicy.FILE)"
            )
            return WorkerPart(Kind.DATASET, shard_by_file(x, shard), notes=notes)
        if shard.count > 1 and endless:
            reason = (
                "the dataset's auto_shard_policy is DATA"
                if policy == AutoShardPolicy.DATA
                else f"only {files} file(s) for {shard.count} workers"
                if files
                else "it reads no list of files"
            )
            notes.append(
                f"input sharded by batch ({reason}): every worker reads all of it, keeps 1/{shard.count}"
            )
        replicas = shard.count * items
        share_last = shard.even and shares_last_step(x, batches, replicas)
        if share_last:
            notes.append(last_step_note(what, last_step(batches, replicas)[1], replicas))
        elif batches and batches > 0 and batches % shard.count and shard.even:
            notes.append(
                f"{batches % shard.count} trailing batch(es) of {batches} unused so workers stay even"
            )
        sharded = shard_dataset(x, shard, what, items, share_last)
        longest, shortest = (None, None) if endless else longest_and_shortest(batches, shard)
        return WorkerPart(
            Kind.DATASET,
            sharded,
            length=dataset_batches(sharded),
            notes=notes,
            longest=longest,
            shortest=shortest,
            fingerprint=_order_fingerprint(x, what) if shard.count > 1 else None,
            batches_per_step=shard.count * request.replicas_per_worker,
        )
    if isinstance(x, tf.keras.utils.Sequence):
        return batches_part(x, y, sample_weight, request, ShardedSequence, items)
    return other_part(x, y, sample_weight, request)
