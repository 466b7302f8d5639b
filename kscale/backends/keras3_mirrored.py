"""One process, several local devices, Keras 3 on TensorFlow: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from kscale.backends._strategy import OneHostMirrored
from kscale.keras3.family import Keras3Family, Keras3Options


class Keras3MirroredBackend(OneHostMirrored):
    name = "mirrored"
    Family = Keras3Family
    Options = Keras3Options
    # Evaluation runs on this process's copy of the model (evaluates_on_copy), fed its whole part; or on
    # the model itself where Keras cannot copy it (StrategyBackend.evaluate)
    uneven_evaluation = True

    def evaluates_on_copy(self) -> bool:
        # Keras 3 reports each output's loss of a batch whose size its trace does not know unweighted (the
        # static batch size is None): exact only on a copy fed as one process is.
        return self.num_replicas > 1
