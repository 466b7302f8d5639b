"""One process, Keras 3 on any of its backends, devices as Keras places them: the same plan and callbacks."""

from __future__ import annotations

from kscale.backends.base import Backend
from kscale.environment import Environment
from kscale.keras3.family import Keras3Family, Keras3Options


class Keras3SingleBackend(Backend):
    name = "single"
    Family = Keras3Family
    Options = Keras3Options
    one_process = True
    # One process evaluates all of the data; its parts are not cut at all.
    uneven_evaluation = False

    @classmethod
    def detect(cls, env: Environment) -> bool:
        # Not under a multi-process launcher: there a lone process training by itself would silently not
        # be distributed (resolve() then says what works instead).
        return env.world_size == 1
