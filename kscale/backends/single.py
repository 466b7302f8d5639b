"""One process, one device, tf.keras: nothing to distribute, but the same plan and callbacks as everywhere."""

from __future__ import annotations

from kscale.backends.base import Backend
from kscale.environment import Environment
from kscale.keras2.family import Keras2Family


class SingleBackend(Backend):
    name = "single"
    Family = Keras2Family
    one_process = True

    @classmethod
    def detect(cls, env: Environment) -> bool:
        return True
