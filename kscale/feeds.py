"""What a worker's part of the data is (`WorkerPart`, its `Kind`), what fit or evaluate asked for
(`FeedRequest`), and what the model's own fit or evaluate get (`Feed`): the types between the rule
(kscale/sharding.py), the cutters (kscale/batch_shards.py, kscale/tf_data.py) and the backends."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kscale.errors import DataError
from kscale.sharding import Shard, longest_and_shortest, part_length, require_samples, shard_arrays
from kscale.structures import num_samples


@dataclasses.dataclass(frozen=True)
class FeedRequest:
    """What fit/evaluate asked for, as one worker sees it."""

    per_replica: int  # samples per replica and step, for array input
    shuffle: bool
    steps: int | None  # steps per epoch for one replica (already divided among replicas); None: the data's
    what: str  # "training data", "validation data", ...: named in every error
    policy: str  # the data policy's name, for messages
    shard: Shard = dataclasses.field(default_factory=Shard)
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
    #: a dataset of batches cut by batch (a Sequence / PyDataset: batch_shards.batches_part; a tf.data
    #: dataset: tf_data.worker_part): the user's batches one step of the whole job takes; None otherwise
    batches_per_step: int | None = None


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
    #: the user's batches one step takes, where its data holds them and each worker feeds them as cut
    #: (WorkerPart.batches_per_step); None otherwise
    batches_per_step: int | None = None


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
        shuffle = False if getattr(part.x, "orders_its_steps", False) else None
        return Feed(
            part.x,
            notes=part.notes,
            steps=steps,
            epoch_steps=steps or known,
            shuffle=shuffle,
            fingerprint=part.fingerprint,
            batches_per_step=part.batches_per_step,
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
