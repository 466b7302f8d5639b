"""Datasets and generators of batches as one worker takes them: a Keras Sequence / PyDataset cut by batch
(`BatchShard`), a Python generator read by every worker (`GeneratorShard`), training arrays as this
worker's batches (`ArrayBatches`). Framework-free: each Keras family binds the dataset classes to its own
base class."""

from __future__ import annotations

import collections.abc
from typing import Any

import numpy as np

from kscale.errors import DataError
from kscale.feeds import FeedRequest, Kind, WorkerPart
from kscale.sharding import Shard, last_step, last_step_note, longest_and_shortest, part_length
from kscale.structures import flatten, joined, leaves_in_order, map_structure, rows

_CUTTABLE = (
    "Pass numpy arrays, a keras.utils.Sequence / PyDataset of batches, or (with TensorFlow) a "
    "tf.data.Dataset (e.g. Dataset.from_generator(...).batch(b))"
)


def other_part(x: Any, y: Any, sample_weight: Any, request: FeedRequest) -> WorkerPart:
    """Input kscale cuts by batch as it comes (a Python generator or iterator of batches: `GeneratorShard`),
    or cannot cut at all (a DataFrame): fine for one worker, an error for several."""
    if x is None:
        raise DataError(f"no {request.what} given: pass numpy arrays, a tf.data.Dataset or a Keras dataset.")
    if is_batch_generator(x) and (request.shard.count > 1 or request.replicas_per_worker > 1):
        return generator_part(x, y, sample_weight, request)
    if request.shard.count > 1:
        raise DataError(
            f"kscale cannot split {type(x).__name__} {request.what} between {request.shard.count} workers "
            "(only numpy arrays, Python generators of batches, tf.data.Dataset and keras.utils.Sequence / "
            f"PyDataset can be sharded). {_CUTTABLE}, or pass data_policy='none' if you already give each "
            "worker its own data."
        )
    if request.replicas_per_worker > 1:
        # Keras would split each of its batches over the replicas: the global batch stays the batch the
        # data yields while the rate is scaled for replicas x that batch, a silently different training.
        raise DataError(
            f"{type(x).__name__} {request.what} yields batches kscale cannot size per replica, and this "
            f"process trains {request.replicas_per_worker} replicas, over which Keras would split each batch "
            f"(the learning rate is scaled for {request.replicas_per_worker} whole batches). {_CUTTABLE}."
        )
    return WorkerPart(Kind.OTHER, x, y, sample_weight)


def is_batch_generator(x: Any) -> bool:
    """A Python generator, or another iterator (not a dataset Keras reads by index or re-iterates)."""
    return isinstance(x, collections.abc.Iterator) and not hasattr(x, "__getitem__")


def generator_part(x: Any, y: Any, sample_weight: Any, request: FeedRequest) -> WorkerPart:
    """This worker's batches of a generator of batches (`GeneratorShard`), checked as they begin."""
    no_separate_targets(y, sample_weight, "the generator's batches")
    if request.steps is None:
        raise DataError(
            f"a generator as {request.what} needs steps_per_epoch (validation_steps, steps) under "
            f"{request.shard.count * request.replicas_per_worker} replicas: kscale cannot know its length, "
            "and every replica must run the same number of steps. Pass the steps one process at your batch "
            "size runs per epoch: kscale divides them by the replicas."
        )
    shard = GeneratorShard(x, request.shard, request.replicas_per_worker, request.what)
    replicas = request.shard.count * request.replicas_per_worker
    note = (
        f"the {request.what}'s generator read whole by every worker, each keeping its replicas' batches "
        f"(batch i for replica i mod {replicas}): each step's {replicas} batches, as one process reads them"
    )
    return WorkerPart(Kind.GENERATOR, shard, notes=[note], fingerprint=shard.fingerprint())


class GeneratorShard:
    """A Python generator (or iterator) of batches as one worker takes it: every worker reads every batch,
    in order, and keeps those of its replicas (batch i is global replica i mod R's), so that step s trains
    on batches s·R .. s·R+R-1, the R consecutive batches one process at the global batch takes as one
    (the user's steps_per_epoch, counted in batches, is divided by R). Yields one batch per replica of
    this worker, in turn (a strategy pulls one each), or, `joined`, their rows as one batch per step (a
    Keras that spreads a worker's batch over its devices).

    The first step's batches are read when it is made, to check them: a batch whose arrays do not share
    one first dimension (a generator of samples, not of batches) is a DataError, and `fingerprint` (of
    their targets, as for a Sequence: inputs may be augmented at random) lets the workers check that they
    read the same generator."""

    def __init__(self, batches: Any, shard: Shard, replicas_per_worker: int, what: str):
        self._source = iter(batches)
        self.replicas = shard.count * replicas_per_worker
        self.mine = range(shard.index * replicas_per_worker, (shard.index + 1) * replicas_per_worker)
        self.joined = False
        self.what = what
        self._pending: list[Any] = []
        self._first = [next(self._source) for _ in range(self.replicas)]
        for batch in self._first:
            _check_is_a_batch(batch, what)

    def first_batch(self) -> Any:
        """This worker's first batch (as `__next__` will yield it), without taking it."""
        mine = [self._first[i] for i in self.mine]
        return joined(mine) if self.joined and len(mine) > 1 else mine[0]

    def fingerprint(self) -> list[np.ndarray]:
        """The arrays the workers compare: the targets and sample weights of the first step's batches."""
        targets = [
            part for b in self._first if isinstance(b, tuple | list) for part in b[1:] if part is not None
        ]
        return [np.asarray(a) for t in targets for a in flatten(t)]

    def __iter__(self) -> GeneratorShard:
        return self

    def __next__(self) -> Any:
        if not self._pending:
            step = self._first or [next(self._source) for _ in range(self.replicas)]
            self._first = []
            mine = [step[i] for i in self.mine]
            self._pending = [joined(mine)] if self.joined and len(mine) > 1 else mine
        return self._pending.pop(0)


def _check_is_a_batch(batch: Any, what: str) -> None:
    """A DataError unless every array of `batch` has the same first dimension (its samples)."""
    leaves = [np.shape(leaf) for leaf in leaves_in_order(batch) if leaf is not None]
    if not leaves or any(len(shape) == 0 for shape in leaves) or len({shape[0] for shape in leaves}) > 1:
        raise DataError(
            f"the {what}'s generator yields {', '.join(str(s) for s in leaves)}: not a batch, whose arrays "
            "all have one first dimension (its samples). kscale hands each replica whole batches of a "
            "generator; one that yields a sample at a time must batch them first (yield x[i:i + batch_size], "
            "y[i:i + batch_size]), or feed tf.data.Dataset.from_generator(...).batch(batch_size)."
        )


def no_separate_targets(y: Any, sample_weight: Any, kind: str) -> None:
    if y is not None or sample_weight is not None:
        raise DataError(f"y and sample_weight must be inside {kind}, not passed separately to fit.")


class BatchShard:
    """A dataset of batches (a Keras Sequence or PyDataset) restricted to batches r, r+N, ...: every worker
    gets as many of them. The last step's batches are joined and cut in equal parts, `items_per_worker`
    for each worker (one per replica where a strategy pulls one batch per replica), where each part gets a
    sample; otherwise the trailing batches stay unused. A mixin: each Keras family binds it to its own
    dataset base class.

    With `orders` (fit's shuffle, which Keras applies to the order of a dataset's batches by drawing from
    each process's own `random`: the workers' steps would pair other batches), pass p over the steps takes
    them in row p's order, the one process's fit draws for that epoch (the chief's draw, given to every
    worker), and Keras is told not to shuffle; with `shuffle` and no orders (evaluation never shuffles,
    so: none drawn), in an order that depends only on the pass. A pass begins where step 0 is read after
    the previous pass read its last (Keras 3 reads the next epoch ahead of `on_epoch_end`)."""

    #: Its steps come in an order of its own, the same on every worker: Keras must not shuffle them.
    orders_its_steps = True
    #: What the user passed, as the messages name it: in "the {noun} has 1 batch(es)", and its type.
    noun = "dataset"
    type_name = "a dataset"

    def __init__(
        self, batches: Any, shard: Shard, items_per_worker: int = 1, shuffle: bool = False, orders: Any = None
    ):
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
        self.orders = None if orders is None else np.asarray(orders)
        self.passes = 0  # passes over the steps begun before the current one
        self._read_last = False
        self._steps = self._step_order()

    def _step_order(self) -> np.ndarray:
        steps, partial = divmod(len(self), self.items_per_worker)  # a partial step is never taken
        order = np.arange(steps + bool(partial))
        if self.orders is not None:  # one process's order of its batches; of them, the steps there are
            drawn = self.orders[min(self.passes, len(self.orders) - 1)]
            order[:steps] = drawn[drawn < steps]
        elif self.shuffle:  # the same on every worker
            order[:steps] = np.random.default_rng([0, self.passes]).permutation(steps)
        return order

    def _last_step_samples(self) -> int:
        """At least this many samples in the last step (read only where fewer batches than parts)."""
        if self.tail >= self.parts:
            return self.tail  # no batch is empty
        return sum(rows(self.batches[i]) for i in range(self.head, len(self.batches)))

    def __len__(self) -> int:
        if self.shares_last_step:
            return (self.head // self.parts + 1) * self.items_per_worker
        return part_length(len(self.batches), self.shard)

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} out of range for a shard of {len(self)} batches")
        if index == 0 and self._read_last:  # a new pass
            self.passes += 1
            self._read_last = False
            self._steps = self._step_order()
        self._read_last = self._read_last or index == len(self) - 1
        step, item = divmod(index, self.items_per_worker)
        index = int(self._steps[step]) * self.items_per_worker + item
        position = index * self.shard.count + self.shard.index
        if not self.shares_last_step or position < self.head:
            return self.batches[position]
        if self._joined is None:  # once per epoch: the last step's batches, one after the other
            self._joined = joined([self.batches[i] for i in range(self.head, len(self.batches))])
        each = rows(self._joined) // self.parts
        start = (self.shard.index * self.items_per_worker + index % self.items_per_worker) * each
        return map_structure(lambda a: None if a is None else a[start : start + each], self._joined)

    def on_epoch_end(self) -> None:
        self._joined = None  # the user's dataset may change its batches now
        self.batches.on_epoch_end()


class ArrayBatches:
    """This worker's part of training arrays as its batches, for a Keras that takes each as this worker's
    batch (Keras 3 on torch and on JAX), where Keras' own slicing of the part would not do: the last step
    is shared unevenly (`WorkerPart.last_step`), or every epoch takes one process's order
    (`WorkerPart.orders`). Full steps of `per_worker` rows, then this worker's share of the last step with
    its gradient weight (kscale.step_weights.Weighted: one row per sample, for Keras to cut with the
    batch), or, where every process's batches must have the same rows (`WorkerPart.last_positions`: Keras
    3 on JAX makes one array of them, cut evenly over its devices), the last step whole, the same on every
    worker (kscale.step_weights.WholeStep: laid out on every device, each computing one process's step).

    Pass p over the batches reads row p of the orders; without them the part is read in order, or,
    shuffled (steps given: no orders are drawn), in an order of kscale's own that depends only on the pass
    (no draw from the user's random state). A pass begins when batch 0 is read after the previous pass
    read its last: Keras 3 makes the next epoch's iterator, and on JAX starts reading it ahead, before it
    calls `on_epoch_end`; reading batch 0 again in a pass (Keras peeking at a batch to build the model)
    begins none.

    A mixin: each Keras family binds it to its own dataset base class (keras3.data: PyDataset)."""

    def __init__(self, part: WorkerPart, request: FeedRequest):
        super().__init__()
        last = part.last_step
        self.arrays = (part.x, part.y, part.sample_weight)
        self.per_worker = request.per_worker
        self.shuffle = request.shuffle
        self.orders = None if part.orders is None else np.asarray(part.orders)
        self.last_positions = None if part.last_positions is None else np.asarray(part.last_positions)
        self.passes = 0  # passes over the batches begun before the current one
        self._read_last = False
        self.full_steps, self.last_rows = divmod(part.length, self.per_worker)
        self.last_weight = (
            1.0 if last is None or self.last_positions is not None else last.weight(self.last_rows)
        )
        self.weigh = last is not None and self.last_positions is None
        self.weighted = part.sample_weight is not None
        self._order = self._epoch_order()

    def _epoch_order(self) -> np.ndarray:
        if self.orders is not None:
            return self.orders[min(self.passes, len(self.orders) - 1)]
        rows = self.full_steps * self.per_worker + self.last_rows
        if self.shuffle:
            return np.random.default_rng([0, self.passes]).permutation(rows)
        return np.arange(rows)

    def __len__(self) -> int:
        return self.full_steps + (1 if self.last_step() else 0)

    def last_step(self) -> bool:
        return self.weigh or self.last_positions is not None or bool(self.last_rows)

    def __getitem__(self, index: int) -> Any:
        from kscale.step_weights import Weighted, WholeStep

        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} out of range for {len(self)} batches")
        if index == 0 and self._read_last:  # a new pass
            self.passes += 1
            self._read_last = False
            self._order = self._epoch_order()
        self._read_last = self._read_last or index == len(self) - 1
        start = index * self.per_worker
        whole = index >= self.full_steps and self.last_positions is not None
        if whole:  # the whole last step, on every worker
            positions = self.last_positions[min(self.passes, len(self.last_positions) - 1)]
        elif index < self.full_steps:
            positions = self._order[start : start + self.per_worker]
        else:  # this worker's share of the last step
            positions = self._order[start : start + self.last_rows]
        x, y, weights = self.arrays
        batch = tuple(map_structure(lambda a: np.asarray(a)[positions], a) for a in (x, y) if a is not None)
        if self.weighted:
            batch = (*batch, np.asarray(weights)[positions])
        if whole:
            return WholeStep(batch, np.ones(len(positions), np.float32))
        if not self.weigh:
            return batch
        factor = 1.0 if index < self.full_steps else self.last_weight
        return Weighted(batch, np.full(len(positions), factor, np.float32))


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
        return WorkerPart(
            Kind.SEQUENCE, x, length=len(x), longest=len(x), shortest=len(x), batches_per_step=1
        )
    shuffle = bool(request.shuffle) and not request.evaluation
    batches = shard_class(x, shard, items_per_worker, shuffle, None if request.evaluation else request.orders)
    notes = []
    if batches.shares_last_step:  # the batches' sizes are not known without reading them all
        notes.append(last_step_note(request.what, batches.tail, parts))
    elif len(x) % shard.count and shard.even:
        notes.append(f"{len(x) % shard.count} trailing batch(es) of {len(x)} unused so workers stay even")
    longest, shortest = longest_and_shortest(len(x), shard)
    return WorkerPart(
        Kind.SEQUENCE,
        batches,
        length=len(batches),
        notes=notes,
        longest=longest,
        shortest=shortest,
        batches_per_step=parts,
    )
