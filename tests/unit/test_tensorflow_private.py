"""The private TensorFlow attribute kscale reads (kscale/_tensorflow_private.py), on the installed one."""

from __future__ import annotations

import tensorflow as tf

from kscale import _tensorflow_private, frameworks


def test_tensorflow_says_which_keras_tf_keras_became_once_it_is_used():
    tf.keras.Model  # noqa: B018  (used: TensorFlow >= 2.16 decides here)
    decided = _tensorflow_private.tf_keras_decided(tf)
    if tuple(int(part) for part in tf.__version__.split(".")[:2]) < (2, 16):
        assert decided == "keras_2"
    else:
        assert decided in ("tf_keras", "keras_3"), "TensorFlow renamed its Keras loader's state"
        assert (decided == "tf_keras") == tf.keras.__name__.startswith("tf_keras")
    assert frameworks.tf_keras_is_keras_2()  # lanes A and B train tf.keras
