"""This worker's part of the data: equal shards for training, so every worker runs the same number of steps.

The rule for training: cut the data into N equal parts (dropping at most N-1 trailing samples), give
part r to worker r. Equal parts mean equal step counts, so a collective never waits for a worker that
has run out of data. Worker r takes every N-th element starting at r: at each step the N workers
together see exactly the samples one process would see with an N-times larger batch. Of a dataset of
batches, the last step's batches are joined and cut in equal parts (`last_step`), as one process at the
global batch takes them in its last step.

Evaluation on backends without a collective per step (`Shard.even=False`) drops nothing: worker r
takes every N-th element from r to the end, and the metric states are summed over workers afterwards.

Framework-free (numpy only): what depends on tf.data or a Keras dataset class lives in kscale.tf_data and
in the backends.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kscale.errors import DataError


@dataclasses.dataclass(frozen=True)
class Shard:
    """Which part of the data this worker takes: part `index` of `count`."""

    index: int = 0
    count: int = 1
    #: Equal parts (the trailing remainder dropped); False: the parts differ by one, nothing is dropped.
    even: bool = True


def flatten(structure: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts (dicts in key order, as tf.nest and keras.tree do)."""
    if isinstance(structure, dict):
        return [leaf for key in sorted(structure) for leaf in flatten(structure[key])]
    if isinstance(structure, list | tuple):
        return [leaf for item in structure for leaf in flatten(item)]
    return [structure]


def map_structure(function: Callable[[Any], Any], structure: Any) -> Any:
    """`structure` with `function` applied to every leaf."""
    if isinstance(structure, dict):
        return {key: map_structure(function, value) for key, value in structure.items()}
    if isinstance(structure, list | tuple):
        mapped = [map_structure(function, item) for item in structure]
        return type(structure)(mapped) if not hasattr(structure, "_fields") else type(structure)(*mapped)
    return function(structure)


def _is_array(leaf: Any) -> bool:
    """numpy arrays and array-likes Keras slices itself: TensorFlow, JAX and torch tensors."""
    return isinstance(leaf, np.ndarray) or (
        hasattr(leaf, "shape")
        and hasattr(leaf, "dtype")
        and hasattr(leaf, "__array__")
        and len(leaf.shape) > 0
    )


def is_array_data(x: Any) -> bool:
    """True for numpy arrays / tensors, or lists, tuples and dicts of them (what Keras slices itself)."""
    leaves = flatten(x)
    return bool(leaves) and all(_is_array(leaf) for leaf in leaves)


def num_samples(*structures: Any) -> int:
    """The common first dimension of every array in `structures` (None entries are ignored)."""
    lengths = {int(leaf.shape[0]) for s in structures if s is not None for leaf in flatten(s)}
    if len(lengths) != 1:
        raise DataError(
            f"the arrays given to fit have different numbers of samples {sorted(lengths)}; x, y and "
            "sample_weight must have the same first dimension."
        )
    return lengths.pop()


def shard_arrays(structure: Any, shard: Shard, total: int | None = None) -> Any:
    """Every `shard.count`-th sample from `shard.index`, after cutting to a multiple of `count` if even."""
    if structure is None or shard.count == 1:
        return structure
    total = num_samples(structure) if total is None else total
    usable = (total // shard.count) * shard.count if shard.even else total
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


@dataclasses.dataclass(frozen=True)
class FeedRequest:
    """What fit/evaluate asked for, as one worker sees it."""

    per_replica: int  # samples per replica and step, for array input
    shuffle: bool
    steps: int | None  # steps per epoch for one replica (already divided among replicas); None: the data's
    what: str  # "training data", "validation data", ...: named in every error
    policy: str  # the data policy's name, for messages
    shard: Shard = Shard()
    #: replicas this worker drives; Keras splits a worker's batch over them where it does so itself
    replicas_per_worker: int = 1
    #: data_policy='every_sample' for training: every sample once per epoch, the last step padded
    every_sample: bool = False
    #: evaluate()'s data (its own or fit's validation data), not training data
    evaluation: bool = False
    #: evaluated on this process's copy of the model (the backend's `evaluates_on_copy`): fed as one
    #: process is, not to the backend's replicas
    on_copy: bool = False
    #: the epochs Keras' fit will run over the training data (one pass of a dataset each)
    epochs: int = 1

    @property
    def per_worker(self) -> int:
        """Samples per step for this worker (what Keras' batch_size means when one process feeds them)."""
        return self.per_replica * self.replicas_per_worker


@dataclasses.dataclass
class WorkerPart:
    """This worker's part of the user's data, before a backend decides how it reaches Keras."""

    kind: str  # "arrays" | "dataset" | "sequence" | "other"
    x: Any
    y: Any = None
    sample_weight: Any = None
    length: int | None = None  # samples (arrays) or batches (dataset, Sequence); None if unknown
    longest: int | None = None  # the length of the largest worker's part (parts differ when not even)
    shortest: int | None = None  # the length of the smallest worker's part
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
    shuffle: bool | None = None  # what Keras' own `shuffle` must be, where the feed shuffles itself
    #: what to do when training ends (the feed's own bookkeeping of the user's data), or None
    after_training: Callable[[], None] | None = None


def one_process_feed(part: WorkerPart, request: FeedRequest) -> Feed:
    """Feed a worker whose model takes this worker's data as is: Keras slices and batches it as usual."""
    steps = request.steps
    if part.kind == "every_sample":
        steps = checked_steps(steps, part.length, request)
        return Feed(part.x, steps=steps, notes=part.notes, epoch_steps=steps or part.length, shuffle=False)
    if part.kind == "arrays":
        available = math.ceil(part.length / request.per_worker)
        steps = checked_steps(steps, available, request)
        return Feed(
            part.x, part.y, part.sample_weight, request.per_worker, steps, part.notes, steps or available
        )
    if part.kind in ("dataset", "sequence"):
        known = part.length if part.length is not None and part.length >= 0 else None
        steps = checked_steps(steps, known, request)
        if steps is None and part.length is None and request.shard.count > 1 and request.shard.even:
            raise unknown_length(request.what)
        # A BatchShard orders its steps alike on every worker: Keras' shuffle would reorder each one's own
        shuffle = False if isinstance(part.x, BatchShard) else None
        return Feed(part.x, notes=part.notes, steps=steps, epoch_steps=steps or known, shuffle=shuffle)
    return Feed(part.x, part.y, part.sample_weight, steps=steps, notes=part.notes)


def checked_steps(steps: int | None, available: int | None, request: FeedRequest) -> int | None:
    """The steps this worker runs: a training step count the data cannot supply would end the epoch early
    on some worker, or hang the rest, so it is refused; evaluation stops where the data ends, as in Keras."""
    if steps is None or available is None or available < 0 or steps <= available:
        return steps
    if request.evaluation:
        return available
    raise DataError(
        f"steps_per_epoch asks each worker for {steps} steps of {request.what}, but with data_policy="
        f"'{request.policy}' each worker's part has only {available} batch(es). Lower steps_per_epoch, "
        "repeat() the dataset, or choose another data_policy (steps_per_epoch is counted for one replica "
        "and divided by the number of replicas under 'shard')."
    )


def unknown_length(what: str) -> DataError:
    return DataError(
        f"the length of the {what} is unknown, so kscale cannot give every worker the same number of steps "
        "(an uneven split would leave workers waiting for each other forever). Declare the length with "
        "dataset.apply(tf.data.experimental.assert_cardinality(n)), or repeat() the dataset and pass "
        "steps_per_epoch (validation_steps / steps): without repeat(), Keras ends training when the data "
        "runs out, after the first epoch."
    )


def array_part(x: Any, y: Any, sample_weight: Any, request: FeedRequest) -> WorkerPart:
    """This worker's equal share of array input: every N-th sample from its index."""
    shard = request.shard
    total = num_samples(*[a for a in (x, y, sample_weight) if a is not None])
    require_samples(total, shard, request.per_replica, request.what)
    notes = []
    if total % shard.count and shard.even:
        notes.append(f"{total % shard.count} trailing sample(s) of {total} unused so workers stay even")
    x, y, sample_weight = (shard_arrays(a, shard, total) for a in (x, y, sample_weight))
    longest, shortest = longest_and_shortest(total, shard)
    return WorkerPart("arrays", x, y, sample_weight, part_length(total, shard), longest, shortest, notes)


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


_CUTTABLE = (
    "Pass numpy arrays, a keras.utils.Sequence / PyDataset of batches, or (with TensorFlow) a "
    "tf.data.Dataset (e.g. Dataset.from_generator(...).batch(b))"
)


def other_part(x: Any, y: Any, sample_weight: Any, request: FeedRequest) -> WorkerPart:
    """Input kscale cannot cut (a generator, a DataFrame): fine for one worker, an error for several."""
    if x is None:
        raise DataError(f"no {request.what} given: pass numpy arrays, a tf.data.Dataset or a Keras dataset.")
    if request.shard.count > 1:
        raise DataError(
            f"kscale cannot split {type(x).__name__} {request.what} between {request.shard.count} workers "
            "(only numpy arrays, tf.data.Dataset and keras.utils.Sequence / PyDataset can be sharded). "
            f"{_CUTTABLE}, or pass data_policy='none' if you already give each worker its own data."
        )
    if request.replicas_per_worker > 1:
        # Keras would split each of its batches over the replicas: the global batch stays the batch the
        # data yields while the rate is scaled for replicas x that batch, a silently different training.
        raise DataError(
            f"{type(x).__name__} {request.what} yields batches kscale cannot size per replica, and this "
            f"process trains {request.replicas_per_worker} replicas, over which Keras would split each batch "
            f"(the learning rate is scaled for {request.replicas_per_worker} whole batches). {_CUTTABLE}."
        )
    return WorkerPart("other", x, y, sample_weight)


def no_separate_targets(y: Any, sample_weight: Any, kind: str) -> None:
    if y is not None or sample_weight is not None:
        raise DataError(f"y and sample_weight must be inside {kind}, not passed separately to fit.")


class BatchShard:
    """A dataset of batches (a Keras Sequence or PyDataset) restricted to batches r, r+N, ...: every worker
    gets as many of them. The last step's batches are joined and cut in equal parts, `items_per_worker`
    for each worker (one per replica where a strategy pulls one batch per replica), where each part gets a
    sample; otherwise the trailing batches stay unused. A mixin: each Keras family binds it to its own
    dataset base class.

    With `shuffle` (fit's, which Keras applies to the order of a dataset's batches by drawing from each
    process's own `random`: the workers' steps would pair other batches), the steps are taken in an order
    that depends only on the epoch, the same on every worker, and Keras is told not to shuffle."""

    #: What the user passed, as the messages name it: in "the {noun} has 1 batch(es)", and its type.
    noun = "dataset"
    type_name = "a dataset"

    def __init__(self, batches: Any, shard: Shard, items_per_worker: int = 1, shuffle: bool = False):
        super().__init__()
        if len(batches) < shard.count:
            raise DataError(
                f"the {self.noun} has {len(batches)} batch(es), fewer than the {shard.count} workers: some "
                "worker would get no step. Use a smaller batch size or more data."
            )
        self.batches = batches
        self.shard = shard
        self.items_per_worker = items_per_worker
        self.parts = shard.count * items_per_worker
        self.head, self.tail = last_step(len(batches), self.parts)
        self.shares_last_step = shard.even and self.parts > 1 and self._last_step_samples() >= self.parts
        self._joined: Any = None
        self.shuffle = shuffle
        self.epoch = 0
        self._steps = self._step_order()

    def _step_order(self) -> np.ndarray:
        steps, partial = divmod(len(self), self.items_per_worker)  # a partial step is never taken
        order = np.arange(steps + bool(partial))
        if self.shuffle:  # the same on every worker
            order[:steps] = np.random.default_rng([0, self.epoch]).permutation(steps)
        return order

    def _last_step_samples(self) -> int:
        """At least this many samples in the last step (read only where fewer batches than parts)."""
        if self.tail >= self.parts:
            return self.tail  # no batch is empty
        return sum(_rows(self.batches[i]) for i in range(self.head, len(self.batches)))

    def __len__(self) -> int:
        if self.shares_last_step:
            return (self.head // self.parts + 1) * self.items_per_worker
        return part_length(len(self.batches), self.shard)

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} out of range for a shard of {len(self)} batches")
        step, item = divmod(index, self.items_per_worker)
        index = int(self._steps[step]) * self.items_per_worker + item
        position = index * self.shard.count + self.shard.index
        if not self.shares_last_step or position < self.head:
            return self.batches[position]
        if self._joined is None:  # once per epoch: the last step's batches, one after the other
            self._joined = _joined([self.batches[i] for i in range(self.head, len(self.batches))])
        each = _rows(self._joined) // self.parts
        start = (self.shard.index * self.items_per_worker + index % self.items_per_worker) * each
        return map_structure(lambda a: None if a is None else a[start : start + each], self._joined)

    def on_epoch_end(self) -> None:
        self._joined = None
        self.epoch += 1
        self._steps = self._step_order()
        self.batches.on_epoch_end()


def _leaves_in_order(structure: Any) -> list[Any]:
    """The leaves of `structure` in the order map_structure visits them."""
    leaves: list[Any] = []
    map_structure(leaves.append, structure)
    return leaves


def _rows(batch: Any) -> int:
    """The samples in a batch (its first array's first dimension; 0 for what is no batch of arrays)."""
    shape = np.shape(next((leaf for leaf in _leaves_in_order(batch) if leaf is not None), 0))
    return int(shape[0]) if shape else 0


def _joined(batches: list[Any]) -> Any:
    """Batches of one structure as one batch: each leaf's rows, batch after batch, padded with zeros to
    their common shape where they differ (batches padded each to its own longest sequence; one process at
    the global batch pads them all to the longest)."""
    columns = list(zip(*(_leaves_in_order(batch) for batch in batches), strict=True))
    joined = iter(
        None if column[0] is None else _concatenated([np.asarray(a) for a in column]) for column in columns
    )
    return map_structure(lambda _: next(joined), batches[0])


def _concatenated(arrays: list[np.ndarray]) -> np.ndarray:
    common = np.max([a.shape[1:] for a in arrays], axis=0) if arrays[0].ndim > 1 else ()
    return np.concatenate(
        [
            np.pad(
                a,
                [(0, 0), *((0, int(n - m)) for n, m in zip(common, a.shape[1:]))],
                constant_values=_blank(a),
            )
            for a in arrays
        ]
    )


def _blank(array: np.ndarray) -> Any:
    """What padding holds: 0, False, or an empty string (np.pad's 0 would be "0"), also in object arrays."""
    if array.dtype == object and array.size and isinstance(array.flat[0], str | bytes):
        return type(array.flat[0])()
    return np.zeros((), array.dtype).item()


class EverySampleBatches:
    """Array input as this worker's batches under data_policy='every_sample': every sample once per epoch.

    All workers order the samples alike (shuffled by a permutation that depends only on the epoch, so
    every worker draws the same), and step s is the global batch of samples s*B .. s*B+B-1 (B = per-replica
    batch × replicas), cut into one slice per replica: what one process with batch B trains on. The last
    step usually has m < B samples. Its slices are padded to full size with zero-weighted samples, and its
    real samples weighted B/m: each replica's loss is summed over its b rows and divided by b (Keras'
    default reduction), the replicas' gradients are averaged, so the step's gradient is the mean over the m
    real samples, as in one process. Needs a loss reduced by 'sum_over_batch_size' (Keras' default).

    A mixin: each Keras family binds it to its own dataset base class (Sequence, PyDataset). Items are the
    batches of `replicas_per_item` consecutive replicas of this worker (1 where a strategy pulls one batch
    per replica; all of them where Keras takes the worker's whole batch).
    """

    def __init__(self, x: Any, y: Any, sample_weight: Any, request: FeedRequest, replicas_per_item: int):
        super().__init__()
        self.arrays = (x, y, sample_weight)
        self.total = num_samples(*[a for a in self.arrays if a is not None])
        self.per_replica = request.per_replica
        self.replicas = request.shard.count * request.replicas_per_worker
        self.first_replica = request.shard.index * request.replicas_per_worker
        self.items_per_step = request.replicas_per_worker // replicas_per_item
        self.replicas_per_item = replicas_per_item
        self.shuffle = request.shuffle
        self.global_batch = self.per_replica * self.replicas
        self.steps = math.ceil(self.total / self.global_batch)
        self.last_step_samples = self.total - (self.steps - 1) * self.global_batch
        self.epoch = 0
        self._order = self._permutation()

    def _permutation(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.total)
        return np.random.default_rng([0, self.epoch]).permutation(self.total)  # the same on every worker

    def __len__(self) -> int:
        return self.steps * self.items_per_step

    def __getitem__(self, index: int) -> tuple:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} out of range for {len(self)} batches")
        step, item = divmod(index, self.items_per_step)
        rows = self.per_replica * self.replicas_per_item
        start = (
            step * self.global_batch + (self.first_replica + item * self.replicas_per_item) * self.per_replica
        )
        positions = self._order[start : start + rows]  # short, or empty, in the last step only
        x, y, weights = self.arrays
        factor = self.global_batch / self.last_step_samples if step == self.steps - 1 else 1.0
        real = np.ones(len(positions), np.float32) if weights is None else np.asarray(weights)[positions]
        weight = np.zeros(rows, np.float32)
        weight[: len(positions)] = real * factor
        batch = tuple(_padded_rows(a, positions, rows) for a in (x, y) if a is not None)
        return (*batch, weight)

    def on_epoch_end(self) -> None:
        self.epoch += 1
        self._order = self._permutation()


def _padded_rows(structure: Any, positions: np.ndarray, rows: int) -> Any:
    """The rows at `positions` of every array in `structure`, followed by zero rows up to `rows`."""

    def take(array: Any) -> np.ndarray:
        array = np.asarray(array)
        out = np.zeros((rows, *array.shape[1:]), array.dtype)
        out[: len(positions)] = array[positions]
        return out

    return map_structure(take, structure)


def every_sample_part(
    x: Any, y: Any, sample_weight: Any, request: FeedRequest, batches_class: type, replicas_per_item: int
) -> WorkerPart:
    """This worker's batches under data_policy='every_sample' (`batches_class` binds EverySampleBatches to
    its Keras' dataset class)."""
    if not is_array_data(x):
        raise DataError(
            f"data_policy='every_sample' pads the last step of array input, but the {request.what} is "
            f"{type(x).__name__}. Pass numpy arrays (or tensors), or use data_policy='shard' for datasets "
            "(it drops at most one batch per worker each epoch)."
        )
    require_samples(num_samples(*[a for a in (x, y, sample_weight) if a is not None]), request.shard, 1)
    batches = batches_class(x, y, sample_weight, request, replicas_per_item)
    note = (
        f"every sample once per epoch: the last step has {batches.last_step_samples} of "
        f"{batches.global_batch} samples, padded with zero-weighted ones"
        if batches.last_step_samples < batches.global_batch
        else "every sample once per epoch: the samples fill every step"
    )
    return WorkerPart("every_sample", batches, length=len(batches), notes=[note])


def batches_part(
    x: Any,
    y: Any,
    sample_weight: Any,
    request: FeedRequest,
    shard_class: type[BatchShard],
    items_per_worker: int = 1,
) -> WorkerPart:
    """This worker's equal share of a dataset of batches (`shard_class` cuts it for its Keras), taken
    `items_per_worker` batches a step."""
    shard = request.shard
    no_separate_targets(y, sample_weight, shard_class.type_name)
    parts = shard.count * items_per_worker
    if parts == 1:
        return WorkerPart("sequence", x, length=len(x), longest=len(x), shortest=len(x))
    batches = shard_class(x, shard, items_per_worker, request.shuffle and not request.evaluation)
    notes = []
    if batches.shares_last_step:  # the batches' sizes are not known without reading them all
        notes.append(last_step_note(request.what, batches.tail, parts))
    elif len(x) % shard.count and shard.even:
        notes.append(f"{len(x) % shard.count} trailing batch(es) of {len(x)} unused so workers stay even")
    longest, shortest = longest_and_shortest(len(x), shard)
    return WorkerPart(
        "sequence", batches, length=len(batches), notes=notes, longest=longest, shortest=shortest
    )
