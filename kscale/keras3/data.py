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
    if isinstance(x, keras.utils.PyDataset):
        return batch_shards.batches_part(x, y, sample_weight, request, ShardedPyDataset)
    if "torch" in sys.modules:  # the user's DataLoader: torch is imported
        from kscale.keras3 import torch_data

        if torch_data.is_loader(x):
            return torch_data.worker_part(x, y, sample_weight, request)
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset):  # the user's dataset: TensorFlow is imported
        from kscale import tf_data

        # Keras 3 takes the worker's whole batch and spreads it over the worker's devices
        return tf_data.worker_part(x, y, sample_weight, request, request.replicas_per_worker)
    part = batch_shards.other_part(x, y, sample_weight, request)
    if part.kind is feeds.Kind.GENERATOR:  # Keras 3 spreads the worker's batch over its devices: one per step
        part.x.joined = True
        part.x = (batch for batch in part.x)  # a Python generator, which Keras 3 takes as such
    return part


class WeightedArrayBatches(batch_shards.ArrayBatches, keras.utils.PyDataset):
    """This worker's batches of training arrays whose last step is shared (kscale.batch_shards.ArrayBatches)."""


class ShardedPyDataset(batch_shards.BatchShard, keras.utils.PyDataset):
    """A PyDataset restricted to batches r, r+N, ... (kscale.batch_shards.BatchShard)."""

    noun = "dataset"
    type_name = "a keras.utils.PyDataset"
