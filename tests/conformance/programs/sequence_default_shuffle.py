"""A keras.utils.Sequence (Keras 3: PyDataset) of batches given to fit with `shuffle` at its default (True),
fit twice, as keras.io's data-loading guides pass one: one process's Keras takes the batches in an order
it draws from Python's `random` every epoch (Keras 3 also once before the first, peeking at a batch to
build the model). The replicas must train on those orders: 66 samples at 4 a batch, so the last step is
shared by the replicas, a sample each."""

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    base = keras.utils.PyDataset if hasattr(keras.utils, "PyDataset") else keras.utils.Sequence

    class Batches(base):
        def __init__(self, x, y, size):
            super().__init__()
            self.x, self.y, self.size = x, y, size

        def __len__(self):
            return int(np.ceil(len(self.x) / self.size))

        def __getitem__(self, index):
            return self.x[index * self.size : (index + 1) * self.size], self.y[
                index * self.size : (index + 1) * self.size
            ]

    x, y = data(66, 5, seed=41)
    job.seed()
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02), momentum=0.5), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    first = model.fit(Batches(x, y, job.batch(4)), epochs=3, verbose=0)
    job.record("first", first.history)
    more = model.fit(Batches(x, y, job.batch(4)), epochs=2, verbose=0)
    job.record("more", more.history)
    return model
