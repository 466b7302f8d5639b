"""keras.io's data guides: a Python generator of batches with steps_per_epoch. A generator cannot be cut
between workers: one process trains; several get a KScaleError that says what to pass instead."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True
#: Under several workers the expected answer is a DataError naming what to use instead.
EXPECT_ERROR_WHEN_DISTRIBUTED = "DataError"


def main(job):
    keras = job.keras
    x, y = data(64, 4)

    def batches(size):
        while True:
            for start in range(0, len(x), size):
                yield x[start : start + size], y[start : start + size]

    job.seed()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02)), loss="mse")
    model = job.distribute(model)
    model.fit(batches(job.batch(4)), steps_per_epoch=8, epochs=2, verbose=0)
    return model
