"""One process, several local devices, Keras 3 on TensorFlow: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from typing import Any

from kscale import sharding
from kscale.backends._keras3 import Keras3Backend
from kscale.backends._strategy import OneHostMirrored


class Keras3MirroredBackend(OneHostMirrored, Keras3Backend):
    name = "mirrored"
    # Evaluation runs on a copy of the model outside the strategy (`evaluates_on_copy`).
    uneven_evaluation = True

    def evaluates_on_copy(self) -> bool:
        # Keras 3's own evaluate under a MirroredStrategy miscounts a last batch the replicas cannot share
        # evenly, or fails on it (AddN of unequal shapes): evaluate every sample on one device instead.
        return self.num_replicas > 1

    def feed(self, x: Any, y: Any, sample_weight: Any, request: sharding.FeedRequest) -> sharding.Feed:
        if request.evaluation and self.evaluates_on_copy():  # the copy takes the data as one process does
            return Keras3Backend.feed(self, x, y, sample_weight, request)
        return super().feed(x, y, sample_weight, request)
