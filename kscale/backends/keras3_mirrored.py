"""One process, several local devices, Keras 3 on TensorFlow: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from kscale.backends._keras3 import EvaluatesOnCopy, Keras3Backend
from kscale.backends._strategy import OneHostMirrored


class Keras3MirroredBackend(EvaluatesOnCopy, OneHostMirrored, Keras3Backend):
    name = "mirrored"

    def evaluates_on_copy(self) -> bool:
        # Keras 3's own evaluate under a MirroredStrategy miscounts a last batch the replicas cannot share
        # evenly, or fails on it (AddN of unequal shapes): evaluate every sample on one device instead.
        return self.num_replicas > 1
