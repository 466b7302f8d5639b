"""The one private TensorFlow state kscale reads (tf.keras' lazy loader), with the reason no public one serves.

tests/unit/test_tensorflow_private.py checks it on the installed TensorFlow, so an upgrade that renames
it fails there, loudly.
"""

from __future__ import annotations

from typing import Any


def tf_keras_decided(tf: Any) -> str | None:
    """Which Keras `tf.keras` already is in this process ("tf_keras", "keras_3", "keras_2"), or None while
    TensorFlow has not decided, without making it decide.

    TensorFlow >= 2.16 picks tf.keras the first time it is used, from TF_USE_LEGACY_KERAS as it is then,
    and keeps it: a process that set the variable later (Ray's TensorflowTrainer sets it in workers that
    have used TensorFlow already) has Keras 3 as tf.keras all the same. Reading `tf.keras` publicly
    would make the decision, with the variable as it is now. TensorFlow < 2.16 has no such loader (None).
    """
    keras = vars(tf).get("keras")
    if keras is None:
        return None
    if type(keras).__name__ == "KerasLazyLoader":  # not used yet, or deciding
        state = vars(keras)
        return state.get("_tfll_keras_version") if state.get("_tfll_initialized") else None
    # Used: the loader put the module it chose in its place
    name = getattr(keras, "__name__", "")
    if name.startswith("tf_keras"):
        return "tf_keras"
    return "keras_3" if name.startswith("keras._tf_keras") else "keras_2"
