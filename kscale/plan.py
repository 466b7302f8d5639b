"""The scaling plan: what a world of N replicas changes about batch, epochs, steps and learning rate.

Pure arithmetic, no TensorFlow, so every rule is unit-tested on its own and printed the same way on
every backend.
"""

from __future__ import annotations

import dataclasses
import enum
import math

from kscale.errors import DataError, OptionError


class LRScaling(str, enum.Enum):
    """How the learning rate grows with the number of replicas (the global batch grows with it)."""

    LINEAR = "linear"  # Goyal et al. 2017: lr × N
    SQRT = "sqrt"  # Krizhevsky 2014 / for adaptive optimizers: lr × √N
    NONE = "none"


class DataPolicy(str, enum.Enum):
    """What each worker trains on."""

    SHARD = "shard"  # each worker its part of the data, every sample of arrays used; epochs stay as given
    EVERY_SAMPLE = "every_sample"  # the same as shard (arrays train on every sample under both)
    DIVIDE_EPOCHS = "divide_epochs"  # every worker all the data; epochs ÷ N, rounded up (seed 001)
    NONE = "none"  # the user shards the data; kscale touches neither data nor epochs


class BatchSemantics(str, enum.Enum):
    """What `batch_size` given to fit means."""

    PER_REPLICA = "per_replica"  # the default: the same script means the same thing under every backend
    GLOBAL = "global"  # the batch of one whole step, split over the replicas


def parse_option(enum_type: type[enum.Enum], value: object, option: str) -> enum.Enum:
    """Turn a user's string into an enum member, or say which values are valid."""
    if isinstance(value, enum_type):
        return value
    try:
        return enum_type(value)
    except ValueError:
        valid = ", ".join(repr(m.value) for m in enum_type)
        raise OptionError(f"{option}={value!r} is not a valid choice; use one of {valid}.") from None


def lr_scale_factor(rule: LRScaling | str, num_replicas: int) -> float:
    """The factor the single-replica learning rate is multiplied by for `num_replicas` replicas."""
    rule = parse_option(LRScaling, rule, "lr_scaling")
    if rule is LRScaling.LINEAR:
        return float(num_replicas)
    if rule is LRScaling.SQRT:
        return math.sqrt(num_replicas)
    return 1.0


def divide_epochs(epochs: int, num_replicas: int) -> int:
    """Seed 001's rule: every worker sees all the data, so N workers need ⌈epochs / N⌉ epochs."""
    return max(1, math.ceil(epochs / num_replicas))


def divide_steps(steps: int, num_replicas: int, name: str = "steps_per_epoch") -> int:
    """Steps a user counted for one replica, shared by N replicas that each take 1/N of the data."""
    if steps < num_replicas:
        raise DataError(
            f"{name}={steps} is smaller than the {num_replicas} replicas: with data_policy='shard' each "
            f"replica runs {name} // {num_replicas} = 0 steps. Give {name} >= {num_replicas}, or leave it "
            "out and let the data's length decide."
        )
    return steps // num_replicas


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything `distribute()` decided, printed once on rank 0 and kept as `model.kscale_plan`."""

    backend: str
    num_workers: int  # processes
    num_replicas: int  # replicas in sync (processes × devices per process)
    lr_scaling: LRScaling
    data_policy: DataPolicy
    batch_semantics: BatchSemantics = BatchSemantics.PER_REPLICA
    learning_rate_before: float | str | None = None
    learning_rate_after: float | str | None = None
    warmup_epochs: float = 0.0
    per_replica_batch: int | None = None
    epochs_before: int | None = None
    epochs_after: int | None = None
    steps_per_epoch_before: int | None = None
    steps_per_epoch_after: int | None = None
    devices: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: optimizers the model holds besides model.optimizer (a GAN's): (attribute, rate before, rate after)
    own_optimizers: tuple[tuple[str, float | str, float | str], ...] = ()
    #: where fit's data holds its batch and kscale cut it by batch (a Sequence / PyDataset, a batched
    #: tf.data dataset): its batches a step of the whole job (None otherwise)
    batches_per_step: int | None = None

    @property
    def global_batch(self) -> int | None:
        if self.per_replica_batch is None:
            return None
        return self.per_replica_batch * self.num_replicas

    @property
    def lr_factor(self) -> float:
        return lr_scale_factor(self.lr_scaling, self.num_replicas)

    def with_fit(self, **changes: object) -> Plan:
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        def show(value: object) -> str:
            return "(from the data)" if value is None else str(value)

        lines = [
            "kscale plan",
            f"  backend          {self.backend}" + (f" on {', '.join(self.devices)}" if self.devices else ""),
            f"  workers          {self.num_workers} process(es), {self.num_replicas} replica(s) in sync",
            f"  batch            per replica {show(self.per_replica_batch)}, global {show(self.global_batch)}",
        ]
        scaling = f" ({self.lr_scaling.value} scaling, x{self.lr_factor:g}" + (
            f", warmup {self.warmup_epochs:g} epoch(s))" if self.warmup_epochs else ")"
        )
        if self.learning_rate_before is not None or not self.own_optimizers:
            lines.append(
                f"  learning rate    {show(self.learning_rate_before)} -> {show(self.learning_rate_after)}{scaling}"
            )
        lines += [
            f"  learning rate    {name}: {before} -> {after} ({self.lr_scaling.value} scaling, x{self.lr_factor:g})"
            for name, before, after in self.own_optimizers
        ]
        lines += [
            f"  epochs           {show(self.epochs_before)} -> {show(self.epochs_after)}",
            f"  steps per epoch  {show(self.steps_per_epoch_before)} -> {show(self.steps_per_epoch_after)}",
            f"  data policy      {self.data_policy.value}",
        ]
        lines += [f"  note             {note}" for note in self.notes]
        return "\n".join(lines)
