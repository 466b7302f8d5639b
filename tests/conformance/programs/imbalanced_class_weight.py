"""keras.io "Imbalanced classification: credit card fraud detection": a few positives, class_weight of
1/count per class in fit, precision and recall metrics, validation_data. Keras turns class_weight into
sample weights on the dataset it builds, and a tf.distribute strategy's distributed dataset takes no such
map: kscale applies them before it cuts the data. On TensorFlow the same is trained from a tf.data
dataset of (x, y) batches too."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    rng = np.random.default_rng(3)
    x = rng.normal(size=(96, 5)).astype("float32")
    y = ((x[:, 0] + 0.3 * x[:, 1]) > 0.9).astype("float32")[:, None]  # about one in five positive
    counts = np.bincount(y[:, 0].astype(int))
    class_weight = {0: 1.0 / counts[0], 1: 1.0 / counts[1]}
    job.seed()
    model = keras.Sequential(
        [
            keras.Input((5,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(job.rate(1e-2)),
        loss="binary_crossentropy",
        metrics=[keras.metrics.Precision(name="precision"), keras.metrics.Recall(name="recall")],
    )
    model = job.distribute(model)
    history = model.fit(
        x[:80],
        y[:80],
        batch_size=job.batch(8),
        epochs=2,
        shuffle=False,
        validation_data=(x[80:], y[80:]),
        class_weight=class_weight,
        verbose=0,
    )
    job.record("history", history.history)
    if True:  # a tf.data input too, on every backend (keras.io feeds it on JAX and torch as well)
        import tensorflow as tf

        batches = tf.data.Dataset.from_tensor_slices((x[:80], y[:80])).batch(job.batch(8))
        history = model.fit(batches, epochs=1, class_weight=class_weight, verbose=0)
        job.record("history_dataset", history.history)
    job.record("evaluate", model.evaluate(x, y, verbose=0))
    return model
