"""One process, several local devices, Keras 3 on TensorFlow: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from kscale.backends._keras3 import Keras3Backend
from kscale.backends._strategy import OneHostMirrored


class Keras3MirroredBackend(OneHostMirrored, Keras3Backend):
    name = "mirrored"
