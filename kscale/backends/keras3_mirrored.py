"""One process, several local devices, Keras 3 on TensorFlow: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from kscale.backends._strategy import OneHostMirrored
from kscale.keras3.family import Keras3Family, Keras3Options


class Keras3MirroredBackend(OneHostMirrored):
    name = "mirrored"
    Family = Keras3Family
    Options = Keras3Options
    # Evaluation runs on this process's copy of the model (evaluates_on_copy), fed its whole part.
    uneven_evaluation = True

    def evaluates_on_copy(self) -> bool:
        # Keras 3's own evaluate under a MirroredStrategy miscounts a last batch the replicas cannot share
        # evenly, or fails on it (AddN of unequal shapes): evaluate every sample on one device instead.
        return self.num_replicas > 1
