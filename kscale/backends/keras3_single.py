"""One process, Keras 3 on any of its backends, devices as Keras places them: the same plan and callbacks."""

from __future__ import annotations

from kscale.backends._keras3 import Keras3Backend
from kscale.backends.base import OneProcess
from kscale.environment import Environment


class Keras3SingleBackend(OneProcess, Keras3Backend):
    name = "single"

    @classmethod
    def detect(cls, env: Environment) -> bool:
        # Not under a multi-process launcher: there a lone process training by itself would silently not
        # be distributed (resolve() then says what works instead).
        return env.world_size == 1
