"""A user's model file for `kscale bench --model tests/bench/user_model.py:build`."""

import tensorflow as tf


def build():
    model = tf.keras.Sequential(
        [tf.keras.Input((24, 1)), tf.keras.layers.LSTM(8), tf.keras.layers.Dense(3, activation="softmax")]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model
