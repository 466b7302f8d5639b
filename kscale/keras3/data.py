"""A Keras 3 worker's part of the data: numpy arrays, a keras.utils.PyDataset, (on TensorFlow) a
tf.data.Dataset or (on torch) a torch DataLoader, cut by kscale.sharding's rule. Nothing here imports TensorFlow (the JAX lane has none)."""

from __future__ import annotations

import sys
from typing import Any

import keras

from kscale import batch_shards, feeds, structures


def worker_part(x: Any, y: Any, sample_weight: Any, request: feeds.FeedRequest) -> feeds.WorkerPart:
    """This worker's equal part of numpy arrays, a keras.utils.PyDataset or (with TensorFlow) a tf.data.Dataset."""
    if structures.is_array_data(x):
        part = feeds.array_part(x, y, sample_weight, request)
        if part.last_step is None and part.orders is None:
            return part
        # A last step shared unevenly, or each epoch in one process's order: this worker's batches
        batches = WeightedArrayBatches(part, request)
        return feeds.WorkerPart(feeds.Kind.ARRAY_BATCHES, batches, length=len(batches), notes=part.notes)
    # A worker's devices (keras.distribution on JAX), each a batch a training step. Evaluation takes the
    # batches as they come: it runs whole on every device where a worker has several (JaxBackend.evaluate).
    per_step = 1 if request.evaluation else request.replicas_per_worker
    if isinstance(x, keras.utils.PyDataset):
        part = batch_shards.batches_part(x, y, sample_weight, request, ShardedPyDataset, per_step)
        return _steps_joined(part, per_step, lambda batches: StepsJoined(batches, per_step))
    if "torch" in sys.modules:  # the user's DataLoader: torch is imported
        from kscale.keras3 import torch_data

        if torch_data.is_loader(x):
            return torch_data.worker_part(x, y, sample_weight, request)
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset):  # the user's dataset: TensorFlow is imported
        from kscale import tf_data

        # Training: a batch per replica, joined below; evaluation: the batches as they come
        per_item = request.replicas_per_worker if request.evaluation else 1
        part = tf_data.worker_part(x, y, sample_weight, request, per_item)
        return _steps_joined(part, per_step, lambda batches: tf_data.steps_joined(batches, per_step))
    part = batch_shards.other_part(x, y, sample_weight, request)
    if part.kind is feeds.Kind.GENERATOR:  # Keras 3 spreads the worker's batch over its devices: one per step
        part.x.joined = True
        part.x = (batch for batch in part.x)  # a Python generator, which Keras 3 takes as such
    return part


def _steps_joined(part: feeds.WorkerPart, per_step: int, join: Any) -> feeds.WorkerPart:
    """A worker with several devices: Keras 3 spreads each batch it is given over them, so each step's
    batches (one per device, as a strategy pulls them) are given joined, one batch a step. The user's batch
    is a replica's; given as is, it would be the worker's, cut over its devices, at a rate scaled for
    `per_step` whole batches: a silently different training."""
    if per_step == 1 or part.kind not in (feeds.Kind.DATASET, feeds.Kind.SEQUENCE):
        return part
    part.x = join(part.x)
    if part.length is not None and part.length >= 0:
        part.length //= per_step
    return part


class StepsJoined(keras.utils.PyDataset):
    """A worker's batches (kscale.batch_shards.BatchShard), `per_step` a step, as one batch a step."""

    #: The batches' own order is kept: Keras must not shuffle the steps (BatchShard orders them).
    orders_its_steps = True

    def __init__(self, batches: Any, per_step: int):
        super().__init__()
        self.batches, self.per_step = batches, per_step

    def __len__(self) -> int:
        return len(self.batches) // self.per_step  # a partial step is never taken (BatchShard)

    def __getitem__(self, step: int) -> Any:
        if not 0 <= step < len(self):
            raise IndexError(f"step {step} out of range for {len(self)} steps")
        first = step * self.per_step
        return structures.joined([self.batches[i] for i in range(first, first + self.per_step)])

    def on_epoch_end(self) -> None:
        self.batches.on_epoch_end()


class WeightedArrayBatches(batch_shards.ArrayBatches, keras.utils.PyDataset):
    """This worker's batches of training arrays whose last step is shared (kscale.batch_shards.ArrayBatches)."""


class ShardedPyDataset(batch_shards.BatchShard, keras.utils.PyDataset):
    """A PyDataset restricted to batches r, r+N, ... (kscale.batch_shards.BatchShard)."""

    noun = "dataset"
    type_name = "a keras.utils.PyDataset"
