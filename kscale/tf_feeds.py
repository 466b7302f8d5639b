"""A worker's part of the data as the tf.data pipeline a tf.distribute strategy (or Horovod's Keras) reads:
arrays in batches per replica, in one process's orders, with a shared last step's weights; a Sequence or a
generator as a dataset; class weights as sample weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from kscale.errors import DataError
from kscale.feeds import FeedRequest, Kind, LastStep, WorkerPart
from kscale.sharding import slices
from kscale.step_weights import Weighted
from kscale.structures import num_samples
from kscale.tf_data import dataset_batches


def sequence_to_dataset(sequence: tf.keras.utils.Sequence) -> tf.data.Dataset:
    """A Sequence as a tf.data pipeline (strategy backends feed replicas from tf.data only)."""
    first = sequence[0]
    signature = tf.nest.map_structure(
        lambda a: tf.TensorSpec(shape=(None, *np.shape(a)[1:]), dtype=tf.as_dtype(np.asarray(a).dtype)),
        tuple(first) if isinstance(first, list) else first,
    )

    pass_ended = [True]

    def generate():
        # A pass cut short (take() stops pulling once it has its batches) never reaches the end of this
        # function: end its epoch when the next pass starts.
        if not pass_ended[0]:
            sequence.on_epoch_end()
        pass_ended[0] = False
        for i in range(len(sequence)):
            item = sequence[i]
            yield tuple(item) if isinstance(item, list) else item
        pass_ended[0] = True
        sequence.on_epoch_end()

    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(sequence)))


def generator_to_dataset(batches: Any) -> tf.data.Dataset:
    """A worker's batches of a generator (kscale.batch_shards.GeneratorShard) as a tf.data pipeline (strategy
    backends feed replicas from tf.data only). Each pass goes on where the last stopped, as the
    generator does."""
    first = batches.first_batch()
    signature = tf.nest.map_structure(
        lambda a: tf.TensorSpec(shape=(None, *np.shape(a)[1:]), dtype=tf.as_dtype(np.asarray(a).dtype)),
        tuple(first) if isinstance(first, list) else first,
    )
    return tf.data.Dataset.from_generator(
        lambda: (tuple(b) if isinstance(b, list) else b for b in batches), output_signature=signature
    )


def arrays_to_dataset(
    arrays: tuple,
    batch_size: int,
    shuffle: bool,
    replicas: int = 1,
    last_step: LastStep | None = None,
    orders: Any = None,
) -> tf.data.Dataset:
    """(x, y, sample_weight) arrays as a dataset of `batch_size` batches for each of `replicas` replicas,
    reshuffled each epoch if asked.

    Each step's `replicas` consecutive batches are one batch of `batch_size × replicas` samples cut in
    `replicas` slices: what one process at that batch trains on, step by step. The last step's samples
    are cut in slices as even as they go (72 samples at 2 × 8: four steps of 8 + 8, then 4 + 4, where
    batches of 8 left a ninth batch no step could take); fewer samples than replicas are left out (no
    replica is handed an empty batch; kscale.feeds.array_part keeps that from happening in training).
    With `last_step` (training arrays the global batch does not divide), every batch comes with its
    replica's gradient weight (kscale.step_weights.Weighted): 1 in full steps, its share in the last.

    As Keras' own array adapter does: the sample order is one shuffled index vector per pass, and each
    batch is one gather from the arrays (a shuffle buffer of every sample, then batching one sample at a
    time, made mirrored training 8% slower than Keras' own feed; kscale bench, RESULTS.md). The full
    batches have a static size, as Keras' have: a batch dimension of None made tracing the first step of
    MobileNetV2 on two mirrored replicas 2 s slower.

    With `orders` (an epochs × length array of positions in the arrays: WorkerPart.orders), the dataset is
    every epoch's batches in turn, epoch e's in the order of row e: one finite stream for all of fit."""
    present = tuple(a for a in arrays if a is not None)
    count = num_samples(*present) if orders is None else int(np.shape(orders)[1])
    step = batch_size * replicas
    full, partial = divmod(count, step)
    last = slices(partial, replicas) if partial >= replicas else []
    weights = [1.0] * (full * replicas) + [last_step.weight(size) if last_step else 1.0 for size in last]

    def batches_of(order: tf.Tensor) -> tf.data.Dataset:
        batches = tf.data.Dataset.from_tensor_slices(
            tf.reshape(order[: full * step], [full * replicas, batch_size])
        )
        start = full * step
        for size in last:
            batches = batches.concatenate(tf.data.Dataset.from_tensors(order[start : start + size]))
            start += size
        return batches

    if orders is not None:
        order = tf.data.Dataset.from_tensor_slices(np.asarray(orders, np.int64))
    else:
        order = tf.data.Dataset.from_tensors(tf.range(count, dtype=tf.int64))
        if shuffle:
            order = order.map(tf.random.shuffle)
    passes = 1 if orders is None else int(np.shape(orders)[0])
    indices = order.flat_map(batches_of).apply(
        tf.data.experimental.assert_cardinality(passes * (full * replicas + len(last)))
    )
    whole = tf.data.Dataset.from_tensors(_as_one_structure(arrays)).repeat()

    def gathered(batch: tf.Tensor, arrays: Any) -> Any:
        return tf.nest.map_structure(lambda a: tf.gather(a, batch), arrays)

    if last_step is None:
        dataset = tf.data.Dataset.zip((indices, whole)).map(
            gathered, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
    else:
        weight = tf.data.Dataset.from_tensor_slices(np.asarray(weights, np.float32)).repeat()
        dataset = tf.data.Dataset.zip((indices, whole, weight)).map(
            lambda batch, arrays, w: Weighted(gathered(batch, arrays), w),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _as_one_structure(arrays: tuple) -> Any:
    """(x, y, sample_weight) arrays as one dataset element: the ones given, a lone x as itself. tf.data
    takes a list for one tensor, so several inputs in a list ([x1, x2]) become a tuple of them."""
    present = tuple(_lists_as_tuples(a) for a in arrays if a is not None)
    return present[0] if len(present) == 1 else present


def _lists_as_tuples(structure: Any) -> Any:
    if isinstance(structure, list | tuple):
        return tuple(_lists_as_tuples(item) for item in structure)
    if isinstance(structure, dict):
        return {key: _lists_as_tuples(value) for key, value in structure.items()}
    return structure


def weighted_batches_part(part: WorkerPart, request: FeedRequest) -> WorkerPart:
    """Training arrays whose last step the global batch does not fill, or shuffled in one process's orders
    (WorkerPart.orders), for a worker whose Keras takes its batches as they come (Horovod): this worker's
    batches as a dataset, each with its gradient weight where the last step is shared; with orders, every
    epoch's batches in turn ("epoch_batches": Keras reads it as one stream, `length` steps an epoch)."""
    arrays = (part.x, part.y, part.sample_weight)
    dataset = arrays_to_dataset(arrays, request.per_worker, request.shuffle, 1, part.last_step, part.orders)
    if part.orders is None:
        return WorkerPart(Kind.DATASET, dataset, length=dataset_batches(dataset), notes=part.notes)
    per_epoch = dataset_batches(dataset) // int(np.shape(part.orders)[0])
    return WorkerPart(Kind.EPOCH_BATCHES, dataset, length=per_epoch, notes=part.notes)


def with_class_weight(dataset: tf.data.Dataset, class_weight: dict) -> tf.data.Dataset:
    """A dataset of (x, y[, sample_weight]) batches with Keras' class_weight applied as sample weights (as
    Keras' own data handler maps it), before kscale distributes it: a distributed dataset has no map."""
    classes = max(int(c) for c in class_weight) + 1
    table = tf.constant([float(class_weight.get(c, 1.0)) for c in range(classes)], tf.float32)

    def weighted(*element: Any) -> tuple:
        if len(element) not in (2, 3) or isinstance(element[1], dict | list | tuple):
            raise DataError(
                "class_weight needs a dataset of (x, y) or (x, y, sample_weight) batches with one target; "
                "pass sample_weight in the dataset instead."
            )
        x, y = element[0], element[1]
        labels = y
        if labels.shape.rank and labels.shape.rank > 1:
            labels = tf.argmax(labels, axis=-1) if labels.shape[-1] != 1 else tf.squeeze(labels, axis=-1)
        indices = tf.cast(tf.round(tf.cast(labels, tf.float32)), tf.int64)
        known = tf.logical_and(indices >= 0, indices < classes)
        weights = tf.where(known, tf.gather(table, tf.clip_by_value(indices, 0, classes - 1)), 1.0)
        if len(element) == 3:
            weights = tf.cast(element[2], tf.float32) * weights
        return x, y, weights

    return dataset.map(weighted, deterministic=True)


def arrays_in_batches(arrays: tuple, sizes: list[int]) -> tf.data.Dataset:
    """(x, y, sample_weight) arrays as one dataset element per size in `sizes`, in order, none empty: the
    way an evaluation part is cut into exactly as many batches as every replica runs steps."""
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    bounds = tf.data.Dataset.from_tensor_slices((starts, np.asarray(sizes, np.int64)))
    whole = tf.data.Dataset.from_tensors(_as_one_structure(arrays)).repeat()
    return tf.data.Dataset.zip((bounds, whole)).map(
        lambda bound, arrays: tf.nest.map_structure(lambda a: a[bound[0] : bound[0] + bound[1]], arrays),
        deterministic=True,
    )


def split_first_batches(dataset: tf.data.Dataset, count: int) -> tf.data.Dataset:
    """The dataset with its first `count` batches each cut in two halves (the first half the larger), the
    rest as they are: `count` more batches of the same samples, none empty while each cut batch holds at
    least two samples (checked when read). One pass over the dataset: a second one (take() then skip())
    would read another order of a shuffle() in it, some samples twice and others never."""

    def pieces(index: tf.Tensor, element: Any) -> tf.data.Dataset:
        cut_it = index < count
        size = tf.shape(tf.nest.flatten(element)[0], out_type=tf.int64)[0]
        check = tf.debugging.assert_greater_equal(
            tf.where(cut_it, size, tf.constant(2, tf.int64)),
            tf.constant(2, tf.int64),
            message="kscale: an evaluation batch of 1 sample cannot be shared by two replicas; evaluate "
            "with batches of at least 2 samples",
        )
        with tf.control_dependencies([check]):
            cut = tf.where(cut_it, (size + 1) // 2, size)
        first = tf.nest.map_structure(lambda t: t[:cut], element)
        second = tf.nest.map_structure(lambda t: t[cut:], element)
        both = tf.data.Dataset.from_tensors(first).concatenate(tf.data.Dataset.from_tensors(second))
        return both.take(tf.where(cut_it, tf.constant(2, tf.int64), tf.constant(1, tf.int64)))

    if count < 1:
        return dataset
    return dataset.enumerate().flat_map(lambda index, *element: pieces(index, _one(element)))


def _one(element: tuple) -> Any:
    """A dataset element as map functions get it spread over their arguments, as one structure again."""
    return element if len(element) > 1 else element[0]


def as_dataset(part: WorkerPart, request: FeedRequest) -> tf.data.Dataset:
    """This worker's part as a dataset of per-replica batches (what tf.distribute strategies are fed)."""
    if part.kind is Kind.ARRAYS:
        arrays = (part.x, part.y, part.sample_weight)
        return arrays_to_dataset(
            arrays,
            request.per_replica,
            request.shuffle,
            request.replicas_per_worker,
            part.last_step,
            part.orders,
        )
    if part.kind is Kind.SEQUENCE:
        return sequence_to_dataset(part.x)
    if part.kind is Kind.GENERATOR:
        return generator_to_dataset(part.x)
    return part.x
