"""One process, one device: nothing to distribute, but the same plan and callbacks as everywhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from kscale.backends.base import Backend, OneProcess
from kscale.environment import Environment
from kscale.model_rebuild import recompile


class SingleBackend(OneProcess, Backend):
    name = "single"

    @classmethod
    def detect(cls, env: Environment) -> bool:
        return True

    def prepare_model(
        self, model: tf.keras.Model, make_optimizer: Callable[[], Any], compile_args: dict
    ) -> tf.keras.Model:
        optimizer = make_optimizer()
        if optimizer is model.optimizer:  # nothing was scaled: leave the user's model exactly as it was
            return model
        return recompile(model, optimizer, compile_args)
