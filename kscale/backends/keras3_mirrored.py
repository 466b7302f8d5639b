"""One process, several local devices, Keras 3 on TensorFlow: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from kscale.backends._strategy import OneHostMirrored
from kscale.keras3.family import Keras3Family, Keras3Options


class Keras3MirroredBackend(OneHostMirrored):
    name = "mirrored"
    Family = Keras3Family
    Options = Keras3Options
    # Evaluation runs on the model itself, fed so that no replica ever gets an empty batch (_uneven_feed)
    uneven_evaluation = True
