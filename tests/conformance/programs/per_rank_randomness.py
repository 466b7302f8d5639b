"""A callback that nudges the weights with an unseeded, per-process random generator (a common slip): in
one process it trains; across workers the ranks' weights part, and the job must stop with
RanksDivergedError on every rank instead of training on with different models."""

import os

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf")  # on JAX, set_weights with per-process values is refused by JAX itself
EXACT = False  # the noise is drawn per process
EXPECT_ERROR_WITH_WORKERS = "RanksDivergedError"


def main(job):
    keras = job.keras

    class Jitter(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            rng = np.random.default_rng(os.getpid())
            self.model.set_weights([w + 1e-3 * rng.normal(size=w.shape) for w in self.model.get_weights()])

    x, y = data(32, 3)
    job.seed()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.01)), loss="mse")
    model = job.distribute(model)
    model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0, callbacks=[Jitter()])
    return model
