"""One process, several local devices, Keras 3 on TensorFlow: `tf.distribute.MirroredStrategy`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kscale.backends._strategy import OneHostMirrored
from kscale.errors import BackendError, ModelError
from kscale.keras3.family import Keras3Family, Keras3Options


def refuse_model_without_call(model: Any, backend: str) -> None:
    """Keras 3's TensorFlow trainer builds a model under a tf.distribute strategy by calling it on the first
    batch ("Unable to automatically build the model"), which a model without call() (keras.io's GAN, whose
    train_step calls its sub-models) cannot take; one process never does that build. Stop before training."""
    import keras

    if type(model).call is keras.Model.call:
        raise ModelError(
            f"{type(model).__name__} has no call(), and Keras 3's TensorFlow trainer builds every model it "
            f"trains under a tf.distribute strategy (the {backend} backend) by calling it, a limit of Keras "
            "itself. Give the model a call() (keras.io's Distiller calls its student), or train it with "
            "tf.keras (TF_USE_LEGACY_KERAS=1 with tf_keras; kscale's horovod, multi_worker and mirrored "
            "backends take it)."
        )


def refuse_uncopyable(backend: Any, model: Any) -> None:
    """Keras 3 under a tf.distribute strategy evaluates on each process's copy of the model (Keras' own
    distributed evaluate loses or miscounts samples): a model Keras cannot copy from its config (keras.io's
    Distiller: its __init__ takes models, no get_config) would fail at its first evaluation, halfway
    through fit. Stop at distribute() instead, saying what works."""
    if backend.evaluates_on_copy() and not backend.family.can_copy(backend, model):
        raise ModelError(
            f"Keras 3 under a tf.distribute strategy (the {backend.name} backend) evaluates on a copy of the "
            f"model on each worker, and Keras cannot copy {type(model).__name__} from its config (its "
            "__init__ takes arguments get_config() does not return). Give it get_config() and from_config() "
            "(keras.saving.serialize_keras_object / deserialize_keras_object for sub-models), or train it "
            "with Keras 3 on JAX (KERAS_BACKEND=jax, `kscale run --engine jax`), which evaluates it as it is."
        )


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

    def check_model(self, model: Any) -> None:
        super().check_model(model)
        refuse_model_without_call(model, self.name)

    def place_model(self, model: Any) -> Any:
        placed = super().place_model(model)
        refuse_uncopyable(self, placed)
        return placed

    def compile(
        self, compile_fn: Callable[..., None], optimizer: Any, learning_rate: Any, args: dict, options: Any
    ) -> None:
        refuse_steps_per_execution(args, self.num_replicas, self.name)
        super().compile(compile_fn, optimizer, learning_rate, args, options)

    def evaluates_on_copy(self) -> bool:
        # Keras 3's own evaluate under a MirroredStrategy miscounts a last batch the replicas cannot share
        # evenly, or fails on it (AddN of unequal shapes): evaluate every sample on one device instead.
        return self.num_replicas > 1
