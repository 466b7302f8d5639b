"""TensorFlow's "Training and evaluation with the built-in methods": tf.data.Dataset for training and for
validation_data, evaluate and predict on datasets."""

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    import tensorflow as tf

    x, y = data(64, 4)
    x_val, y_val = data(24, 4, seed=5)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(job.batch(4))
    validation = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(job.batch(4))
    job.seed()
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(6, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.RMSprop(job.rate(0.001)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    history = model.fit(train, epochs=2, validation_data=validation, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(validation, verbose=0))
    job.record(
        "predict", np.asarray(model.predict(tf.data.Dataset.from_tensor_slices(x_val).batch(8), verbose=0))
    )
    return model
