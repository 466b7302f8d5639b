"""TensorFlow's multi-GPU advice for small per-replica batches: `BatchNormalization(synchronized=True)`, whose
batch statistics (mean and variance) are those of the global batch, summed over every replica at every
step, so each replica normalizes as one process at the global batch does and the moving statistics are
the same everywhere. Compared with one process at the global batch: weights, moving statistics, evaluate
and predict. tf.distribute sums the statistics itself; under Horovod, which tf.keras' layer does not know
(it trained each worker on its own batch's statistics, 0.18 away from one process), kscale sums them over
the workers. Keras 3 takes `synchronized=True` on TensorFlow only."""

from tests.conformance.harness import classes

FAMILIES = ("keras2", "keras3-tf")
EXACT = True


def main(job):
    keras = job.keras
    x, y = classes(64, (6, 6, 2), 3, seed=4)
    x = x * 3.0 + 1.0  # statistics far from the initial moving ones
    job.seed()
    model = keras.Sequential(
        [
            keras.Input((6, 6, 2)),
            keras.layers.Conv2D(4, 3),
            keras.layers.BatchNormalization(synchronized=True, momentum=0.8),
            keras.layers.Activation("relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(8),
            keras.layers.BatchNormalization(synchronized=True),
            keras.layers.Activation("relu"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(job.rate(0.05)),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(x, y, batch_size=job.batch(8), verbose=0, return_dict=True))
    job.record("predict", model.predict(x[:6], verbose=0))
    return model
