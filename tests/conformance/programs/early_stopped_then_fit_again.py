"""EarlyStopping ends a fit before its last epoch, and the script fits again, on a keras.utils.Sequence
(Keras 3: PyDataset) and on arrays, each shuffled as fit shuffles by default. One process's fit draws
the shuffle of the epochs it begins only, so the next fit's orders come from there; kscale draws every
epoch's order when fit starts, and must leave the random state as one process's fit does (found by
generated seed 5044 of lane C-tf: a second compile and fit after an early stop, 0.06 off)."""

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
            rows = slice(index * self.size, (index + 1) * self.size)
            return self.x[rows], self.y[rows]

    x, y = data(64, 5, seed=43)
    job.seed()
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05), momentum=0.5), loss="mse")
    model = job.distribute(model)

    def stopping():  # stops after the second epoch: no loss improves by 100
        return keras.callbacks.EarlyStopping(monitor="loss", min_delta=100.0, patience=1)

    stopped = model.fit(Batches(x, y, job.batch(4)), epochs=5, verbose=0, callbacks=[stopping()])
    job.record("stopped_sequence", stopped.history)
    again = model.fit(Batches(x, y, job.batch(4)), epochs=2, verbose=0)
    job.record("again_sequence", again.history)
    stopped = model.fit(x, y, batch_size=job.batch(4), epochs=5, verbose=0, callbacks=[stopping()])
    job.record("stopped_arrays", stopped.history)
    again = model.fit(x, y, batch_size=job.batch(4), epochs=2, verbose=0)
    job.record("again_arrays", again.history)
    return model
