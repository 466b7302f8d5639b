"""One process, several local devices: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

import tensorflow as tf

from kscale.backends._strategy import StrategyMixin
from kscale.backends._tf_keras import TFKerasBackend
from kscale.backends.base import OneProcess
from kscale.environment import Environment, Launcher


class MirroredBackend(OneProcess, StrategyMixin, TFKerasBackend):
    name = "mirrored"

    @classmethod
    def detect(cls, env: Environment) -> bool:
        return env.launcher is Launcher.NONE and len(tf.config.list_physical_devices("GPU")) > 1

    def make_strategy(self) -> tf.distribute.Strategy:
        return tf.distribute.MirroredStrategy(devices=self.requested_devices)
