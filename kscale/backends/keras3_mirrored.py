"""One process, several local devices, Keras 3 on TensorFlow: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from kscale.backends._strategy import OneHostMirrored
from kscale.keras3.family import Keras3Family, Keras3Options


class Keras3MirroredBackend(OneHostMirrored):
    name = "mirrored"
    Family = Keras3Family
    Options = Keras3Options
    # Evaluation runs on the model itself, in the strategy, every replica fed uneven parts to the last
    # sample (StrategyBackend.evaluate), as tf.keras does
    uneven_evaluation = True
