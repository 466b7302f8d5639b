"""A loss written as a function that reduces over the batch itself (`tf.reduce_mean` / `ops.mean` of the
squared errors, as many scripts write one), with sample weights: Keras weighs that one number by the
batch's mean weight, a product of two means that replicas holding slices of the global batch cannot add
up to. kscale stops with a ModelError saying to return one loss per sample; Keras 3 on JAX, whose steps
compute the global batch's loss themselves, trains it as one process. Without sample weights the same
function trains everywhere (a mean of equal slices is the batch's mean)."""

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True
_REFUSED = "ModelError: a loss function returns one number for the batch"
EXPECT_ERROR_UNDER = {way: _REFUSED for way in ("horovod", "multi_worker", "mirrored", "torch")}


def main(job):
    keras = job.keras
    if job.family == "keras2":
        import tensorflow as tf

        mean, square, cast = tf.reduce_mean, tf.square, tf.cast
    else:
        mean, square, cast = keras.ops.mean, keras.ops.square, keras.ops.cast

    def batch_mse(y_true, y_pred):
        return mean(square(cast(y_true, y_pred.dtype) - y_pred))

    x, y = data(64, 5, seed=43)
    weights = (0.5 + np.random.default_rng(3).random(64)).astype("float32")
    job.seed()
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02)), loss=batch_mse)
    model = job.distribute(model)
    plain = model.fit(x, y, batch_size=job.batch(4), epochs=1, shuffle=False, verbose=0)
    job.record("without_weights", plain.history)
    weighted = model.fit(
        x, y, sample_weight=weights, batch_size=job.batch(4), epochs=1, shuffle=False, verbose=0
    )
    job.record("with_weights", weighted.history)
    return model
