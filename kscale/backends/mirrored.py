"""One process, several local devices, tf.keras: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from kscale.backends._strategy import OneHostMirrored
from kscale.keras2.family import Keras2Family


class MirroredBackend(OneHostMirrored):
    name = "mirrored"
    Family = Keras2Family
