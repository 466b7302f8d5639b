"""One process, several local devices, tf.keras: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from kscale.backends._strategy import OneHostMirrored
from kscale.backends._tf_keras import TFKerasBackend


class MirroredBackend(OneHostMirrored, TFKerasBackend):
    name = "mirrored"
