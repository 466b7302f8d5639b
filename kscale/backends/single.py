"""One process, one device: nothing to distribute, but the same plan and callbacks as everywhere."""

from __future__ import annotations

from kscale.backends._tf_keras import TFKerasBackend
from kscale.backends.base import OneProcess
from kscale.environment import Environment


class SingleBackend(OneProcess, TFKerasBackend):
    name = "single"

    @classmethod
    def detect(cls, env: Environment) -> bool:
        return True
