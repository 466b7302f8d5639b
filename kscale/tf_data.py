"""tf.data datasets and tf.keras Sequences cut into equal shards (kscale.sharding's rule), and fed to
strategies: TensorFlow's input pipeline, for every backend that trains on TensorFlow (tf.keras, and Keras 3's
tf.data inputs on TensorFlow)."""

from __future__ import annotations

import math
import weakref
from dataclasses import replace
from typing import Any

import numpy as np
import tensorflow as tf

from kscale import _tensorflow_private
from kscale._tensorflow_private import batched_samples
from kscale.errors import DataError
from kscale.sharding import (
    BatchShard,
    FeedRequest,
    Kind,
    LastStep,
    Shard,
    WorkerPart,
    array_part,
    batches_part,
    is_array_data,
    last_step,
    last_step_note,
    longest_and_shortest,
    map_structure,
    no_separate_targets,
    num_samples,
    other_part,
    part_length,
    slices,
)
from kscale.step_weights import Weighted

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
    """A keras Sequence restricted to batches r, r+N, ... (kscale.sharding.BatchShard)."""

    noun = "Sequence"
    type_name = "a keras.utils.Sequence"


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
    """A worker's batches of a generator (kscale.sharding.GeneratorShard) as a tf.data pipeline (strategy
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
    replica is handed an empty batch; kscale.sharding.array_part keeps that from happening in training).
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


def epochs_in_one_process_order(
    part: tf.data.Dataset, dataset: tf.data.Dataset, epochs: int, iterators: Any
) -> tf.data.Dataset:
    """`epochs` passes of `part` (this worker's share of the user's `dataset`, one iterator of `dataset`
    per pass) as one stream, each pass on the order one process's fit trains that epoch on.

    A seeded `shuffle()` that reshuffles every pass draws the next order for every iterator made of it,
    read or not, and Keras' fit makes some it never reads (`iterators`: the family's
    `_keras_private.FitIterators`, before the first epoch and after each). So before each pass, as many
    iterators of `dataset` are made and dropped unread as one process's fit makes there; the ones after
    the last epoch are the caller's (`after_last_epoch`), made when training ends. The stream is finite:
    an endless repeat() that the strategy's iterator reads ahead would draw orders for epochs that never
    run, and a later fit on the same dataset would start from another order than one process's."""

    def unread(count: int) -> tf.data.Dataset:
        made = tf.data.Dataset.zip((tf.data.Dataset.range(0), dataset))  # makes an iterator, reads none
        none = made.flat_map(lambda *_: part.take(0))
        return tf.data.Dataset.range(count).flat_map(lambda _: none) if count else part.take(0)

    stream = unread(iterators.before_first_epoch).concatenate(part)
    if epochs > 1:
        later = unread(iterators.after_each_epoch).concatenate(part)
        stream = stream.concatenate(tf.data.Dataset.range(epochs - 1).flat_map(lambda _: later))
    return stream


def of_unknown_length(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`dataset` with its length unknown to Keras. Keras 3 makes a new iterator as soon as an evaluation
    has read as many batches as a dataset's known length; the next evaluation drops it unread, and what its
    prefetch took meanwhile (batches of a generator, a Sequence's pass, an order of a reshuffling
    shuffle()) is never given again: the next evaluation would read other batches than one process."""
    return dataset.filter(lambda *_: True)


#: The user's datasets whose fit stopped on an error while kscale read them in one process's orders.
_CUT_SHORT: weakref.WeakSet = weakref.WeakSet()


def cut_short(dataset: tf.data.Dataset) -> None:
    """Note that fit stopped on an error while reading `dataset` (epochs_in_one_process_order), where a
    shuffle() of it draws a new order for every iterator: how many it has drawn is then unknown (the
    strategy's prefetch reads ahead of the step that failed), and a later fit would train on other orders
    than one process's (a fit interrupted for BackupAndRestore, then fit again: 0.08-0.33 off)."""
    if _tensorflow_private.dataset_reshuffles(dataset):
        _CUT_SHORT.add(dataset)


def check_not_cut_short(dataset: tf.data.Dataset) -> None:
    """A DataError for a dataset `cut_short` noted: its next orders are not one process's."""
    if dataset in _CUT_SHORT:
        raise DataError(
            "this tf.data dataset was being read by a fit that stopped on an error, and a shuffle() of it "
            "draws a new order for every pass: the workers drew more of its orders ahead of the step that "
            "stopped than one process would have, so a fit on it now would train on other orders than one "
            "process. Make the dataset again for this fit (call the function that builds it; a restarted "
            "job does), or shuffle(..., reshuffle_each_iteration=False)."
        )


def after_last_epoch(dataset: tf.data.Dataset, iterators: Any) -> None:
    """The iterators one process's fit makes of `dataset` after its last epoch (`iterators.after_each_epoch`),
    made and dropped here, so that what reads `dataset` next draws the order it would in one process."""
    for _ in range(iterators.after_each_epoch):
        iter(dataset)


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
        )
    if isinstance(x, tf.keras.utils.Sequence):
        return batches_part(x, y, sample_weight, request, ShardedSequence, items)
    return other_part(x, y, sample_weight, request)


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
