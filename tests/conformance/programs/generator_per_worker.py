"""A generator of batches whose data each worker draws on its own (unseeded: another order on rank 1).
kscale reads the whole generator on every worker and keeps each replica's batches, which needs the same
generator everywhere: the workers compare the first batches' targets and stop with a DataError that says
so, instead of training on parts that overlap and miss samples. One process trains as usual."""

import os

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True
EXPECT_ERROR_WITH_WORKERS = "DataError"


def main(job):
    keras = job.keras
    x, y = data(64, 4)
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))  # each process its own order

    def batches(size):
        while True:
            order = rng.permutation(len(x)) if job.rank else np.arange(len(x))  # rank 0: as one process
            for start in range(0, len(x), size):
                rows = order[start : start + size]
                yield x[rows], y[rows]

    job.seed()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02)), loss="mse")
    model = job.distribute(model)
    model.fit(batches(job.batch(4)), steps_per_epoch=job.steps(16), epochs=1, verbose=0)
    return model
