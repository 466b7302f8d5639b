"""One process, several local devices, Keras 3 on TensorFlow: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kscale.backends._strategy import OneHostMirrored
from kscale.errors import BackendError
from kscale.keras3.family import Keras3Family, Keras3Options


def refuse_steps_per_execution(args: dict, replicas: int, backend: str) -> None:
    """Keras 3's TensorFlow trainer fails under a tf.distribute strategy with steps_per_execution > 1 (deep
    in its symbolic step: "You must feed a value for placeholder tensor"; Keras 3.15.1, reproduced without
    kscale): stop before training, saying what works."""
    steps = args.get("steps_per_execution") or 1
    if replicas > 1 and isinstance(steps, int) and steps > 1:
        raise BackendError(
            f"compile(steps_per_execution={steps}) fails in Keras 3's TensorFlow trainer under a "
            f"tf.distribute strategy (the {backend} backend), a bug of Keras itself. Compile with "
            "steps_per_execution=1 (the default) here, or train with Keras 3 on JAX (KERAS_BACKEND=jax, "
            "`kscale run --engine jax`), where it works."
        )


class Keras3MirroredBackend(OneHostMirrored):
    name = "mirrored"
    Family = Keras3Family
    Options = Keras3Options
    # Evaluation runs on this process's copy of the model (evaluates_on_copy), fed its whole part.
    uneven_evaluation = True

    def compile(
        self, compile_fn: Callable[..., None], optimizer: Any, learning_rate: Any, args: dict, options: Any
    ) -> None:
        refuse_steps_per_execution(args, self.num_replicas, self.name)
        super().compile(compile_fn, optimizer, learning_rate, args, options)

    def evaluates_on_copy(self) -> bool:
        # Keras 3's own evaluate under a MirroredStrategy miscounts a last batch the replicas cannot share
        # evenly, or fails on it (AddN of unequal shapes): evaluate every sample on one device instead.
        return self.num_replicas > 1
