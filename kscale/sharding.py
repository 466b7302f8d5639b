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

import collections.abc
import dataclasses
import enum
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
    #: every process's batches must have the same rows (Keras 3 on JAX assembles one array of them):
    #: a short last step is padded with zero-weighted rows there (`ArrayBatches`)
    equal_batches: bool = False
    #: evaluate()'s data (its own or fit's validation data), not training data
    evaluation: bool = False
    #: the epochs Keras' fit will run over the training data (one pass of a dataset each)
    epochs: int = 1
    #: shuffled training arrays: the order of the samples in each of `epochs` epochs, as one process's
    #: fit draws it (an epochs × samples array, the same on every worker), or None; for a dataset of
    #: batches (Sequence, PyDataset): the order of one process's batches, its steps, in each epoch
    orders: Any = None

    @property
    def per_worker(self) -> int:
        """Samples per step for this worker (what Keras' batch_size means when one process feeds them)."""
        return self.per_replica * self.replicas_per_worker


class Kind(str, enum.Enum):
    """What a worker's part of the data is, which decides how it reaches Keras."""

    ARRAYS = "arrays"  # NumPy-like arrays (x, y, sample_weight), sliced and batched by Keras
    ARRAY_BATCHES = "array_batches"  # arrays as this worker's batches (Keras 3: kscale/keras3/data.py)
    EPOCH_BATCHES = "epoch_batches"  # a tf.data dataset of every epoch's batches in turn (tf_data.py)
    GENERATOR = "generator"  # a Python generator, one batch per step (GeneratorShard)
    DATASET = "dataset"  # a batched dataset: tf.data (tf_data.py)
    SEQUENCE = "sequence"  # indexed batches: a Keras Sequence / PyDataset, a torch DataLoader
    OTHER = "other"  # anything else, passed to Keras as given


@dataclasses.dataclass
class WorkerPart:
    """This worker's part of the user's data, before a backend decides how it reaches Keras."""

    kind: Kind
    x: Any
    y: Any = None
    sample_weight: Any = None
    length: int | None = None  # samples (arrays) or batches (dataset, Sequence); None if unknown
    longest: int | None = None  # the length of the largest worker's part (parts differ when not even)
    shortest: int | None = None  # the length of the smallest worker's part
    notes: list[str] = dataclasses.field(default_factory=list)
    #: arrays whose last step the global batch does not fill: how its samples are shared (else None)
    last_step: LastStep | None = None
    #: arrays every worker must have read alike, compared before training (a generator's first targets)
    fingerprint: list | None = None
    #: shuffled arrays (kind "arrays"): x, y and sample_weight are the whole arrays, and row e holds the
    #: positions this worker trains on in epoch e, in order (an epochs × length array); None: the arrays
    #: are this worker's part, in order
    orders: Any = None
    #: arrays whose last step every process takes whole (equal_batches: Keras 3 on JAX): row e holds the
    #: positions of the last step's samples in epoch e, the same on every worker; None: no such step
    last_positions: Any = None


@dataclasses.dataclass(frozen=True)
class LastStep:
    """The last step of training arrays the global batch does not divide: its `samples` (m) cut in a slice
    per replica, as even as they go, each replica's gradient weighted by its slice's share (R·m_r/m:
    kscale.step_weights) so that their mean is one process's gradient over the m samples."""

    samples: int
    replicas: int

    def weight(self, rows: int) -> float:
        """The gradient weight of a replica whose slice of this step has `rows` samples."""
        return self.replicas * rows / self.samples


def slices(rows: int, parts: int) -> list[int]:
    """`rows` cut in `parts` sizes as even as they go, the larger first (they differ by at most one)."""
    small, larger = divmod(rows, parts)
    return [small + 1] * larger + [small] * (parts - larger)


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
    #: what to do when fit stops on an error (Keras then skips on_train_end), or None
    after_error: Callable[[], None] | None = None
    #: arrays every worker must have read alike (WorkerPart.fingerprint), compared before training
    fingerprint: list | None = None


def one_process_feed(part: WorkerPart, request: FeedRequest) -> Feed:
    """Feed a worker whose model takes this worker's data as is: Keras slices and batches it as usual."""
    steps = request.steps
    if part.kind is Kind.ARRAY_BATCHES:  # ArrayBatches: this worker's steps, each replica's weight with it
        steps = checked_steps(steps, part.length, request)
        return Feed(part.x, steps=steps, notes=part.notes, epoch_steps=steps or part.length, shuffle=False)
    if part.kind is Kind.EPOCH_BATCHES:  # every epoch's batches in turn: `length` steps an epoch
        steps = checked_steps(steps, part.length, request) or part.length
        return Feed(part.x, steps=steps, notes=part.notes, epoch_steps=steps, shuffle=False)
    if part.kind is Kind.ARRAYS:
        assert part.orders is None, "shuffled arrays are fed by the family as their batches (orders)"
        available = math.ceil(part.length / request.per_worker)
        steps = checked_steps(steps, available, request)
        return Feed(
            part.x, part.y, part.sample_weight, request.per_worker, steps, part.notes, steps or available
        )
    if part.kind is Kind.GENERATOR:
        return Feed(part.x, steps=steps, notes=part.notes, epoch_steps=steps, fingerprint=part.fingerprint)
    if part.kind in (Kind.DATASET, Kind.SEQUENCE):
        known = part.length if part.length is not None and part.length >= 0 else None
        steps = checked_steps(steps, known, request)
        if steps is None and part.length is None and request.shard.count > 1 and request.shard.even:
            raise unknown_length(request.what)
        # A BatchShard orders its steps alike on every worker: Keras' shuffle would reorder each one's own
        shuffle = False if isinstance(part.x, BatchShard) else None
        return Feed(
            part.x,
            notes=part.notes,
            steps=steps,
            epoch_steps=steps or known,
            shuffle=shuffle,
            fingerprint=part.fingerprint,
        )
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
    """This worker's share of array input: every N-th sample from its index.

    Training takes every sample, as one process at the global batch does: step s is samples s·B .. s·B+B-1
    (worker r holding those ≡ r mod N), and a last step the global batch B does not fill is cut in a slice
    per replica, as even as they go, with its `LastStep` (each replica's gradient weighted by its share).
    Only where that step holds fewer samples than replicas (one would get none) are they left out, and
    the plan says so. Evaluation's parts (`Shard.even` False) differ by one sample at most.

    Where every process's batches must have the same rows (`FeedRequest.equal_batches`: Keras 3 on JAX),
    the last step is taken whole by every process instead (`WorkerPart.last_positions`: each device
    computes the same gradient of its m samples, one process's step), and nothing is left out."""
    shard = request.shard
    total = num_samples(*[a for a in (x, y, sample_weight) if a is not None])
    require_samples(total, shard, request.per_replica, request.what)
    notes: list[str] = []
    usable, last = total, None
    replicas = shard.count * request.replicas_per_worker
    global_batch = request.per_replica * replicas
    if shard.even and replicas > 1 and request.equal_batches and total % global_batch:
        remainder = total % global_batch
        last = LastStep(remainder, replicas)
        usable = total - remainder
        notes.append(
            f"every sample once per epoch: the last step's {remainder} samples taken whole by every process, "
            "each device computing their gradient (one process's step; no padding)"
        )
        orders = np.arange(total)[None] if request.orders is None else np.asarray(request.orders)
        longest = shortest = length = usable // shard.count
        return WorkerPart(
            Kind.ARRAYS,
            x,
            y,
            sample_weight,
            length,
            longest,
            shortest,
            notes,
            last,
            orders=orders[:, :usable][:, shard.index :: shard.count],
            last_positions=orders[:, usable:],
        )
    if shard.even and replicas > 1:
        remainder = total % global_batch
        if 0 < remainder < replicas:
            usable -= remainder
            notes.append(
                f"{remainder} trailing sample(s) of {total} unused so no replica is left without a sample "
                f"(fewer than the {replicas} replicas in the last step)"
            )
        elif remainder:
            last = LastStep(remainder, replicas)
            notes.append(
                f"every sample once per epoch: the last step's {remainder} samples cut in {replicas} "
                "slices, each replica's gradient weighted by its slice's share"
            )
    part = dataclasses.replace(shard, even=False)
    longest, shortest = longest_and_shortest(usable, part)
    length = part_length(usable, part)
    if request.orders is not None:  # each epoch's order, one process's: this worker's positions in it
        orders = np.asarray(request.orders)[:, :usable][:, shard.index :: shard.count]
        notes.append(
            f"shuffled each epoch in the order one process's fit draws ({orders.shape[0]} epoch(s), the "
            "chief's draw given to every worker)"
        )
        return WorkerPart(
            Kind.ARRAYS, x, y, sample_weight, length, longest, shortest, notes, last, orders=orders
        )
    x, y, sample_weight = (shard_arrays(a, part, usable) for a in (x, y, sample_weight))
    return WorkerPart(Kind.ARRAYS, x, y, sample_weight, length, longest, shortest, notes, last)


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
        return _joined(mine) if self.joined and len(mine) > 1 else mine[0]

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
            self._pending = [_joined(mine)] if self.joined and len(mine) > 1 else mine
        return self._pending.pop(0)


def _check_is_a_batch(batch: Any, what: str) -> None:
    """A DataError unless every array of `batch` has the same first dimension (its samples)."""
    leaves = [np.shape(leaf) for leaf in _leaves_in_order(batch) if leaf is not None]
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
        return sum(_rows(self.batches[i]) for i in range(self.head, len(self.batches)))

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
            self._joined = _joined([self.batches[i] for i in range(self.head, len(self.batches))])
        each = _rows(self._joined) // self.parts
        start = (self.shard.index * self.items_per_worker + index % self.items_per_worker) * each
        return map_structure(lambda a: None if a is None else a[start : start + each], self._joined)

    def on_epoch_end(self) -> None:
        self._joined = None  # the user's dataset may change its batches now
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
        return WorkerPart(Kind.SEQUENCE, x, length=len(x), longest=len(x), shortest=len(x))
    shuffle = bool(request.shuffle) and not request.evaluation
    batches = shard_class(x, shard, items_per_worker, shuffle, None if request.evaluation else request.orders)
    notes = []
    if batches.shares_last_step:  # the batches' sizes are not known without reading them all
        notes.append(last_step_note(request.what, batches.tail, parts))
    elif len(x) % shard.count and shard.even:
        notes.append(f"{len(x) % shard.count} trailing batch(es) of {len(x)} unused so workers stay even")
    longest, shortest = longest_and_shortest(len(x), shard)
    return WorkerPart(
        Kind.SEQUENCE, batches, length=len(batches), notes=notes, longest=longest, shortest=shortest
    )
