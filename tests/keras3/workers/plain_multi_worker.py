"""Keras 3 on TensorFlow under MultiWorkerMirroredStrategy without kscale: fit, as Keras ships it.

Run as 2 TF_CONFIG workers; prints "fit ran" if Keras' own fit works (keras-team/keras#20585 fixed)."""

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()

import keras  # noqa: E402
import numpy as np  # noqa: E402

with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
x = np.ones((16, 3), np.float32)
model.fit(tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(4), epochs=1, verbose=0)
print("fit ran", flush=True)
