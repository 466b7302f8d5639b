"""keras.io's torch guides shuffle with `DataLoader(..., shuffle=True)`, torch's global generator, unseeded:
each process would draw its own order, and the batches kscale deals out would overlap and miss samples.
kscale gives the loader's sampler a generator seeded as torch's DistributedSampler seeds it (0 plus the
epoch), the same on every process: the ranks train alike (compared), in another order than the
one-process run (not compared with it)."""

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras3-torch",)
EXACT = False  # the order is drawn by torch's global generator in one process, by kscale's under it


def main(job):
    keras = job.keras
    import torch

    x, y = data(64, 5)
    pairs = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    job.seed()
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    history = model.fit(
        torch.utils.data.DataLoader(pairs, batch_size=job.batch(4), shuffle=True), epochs=2, verbose=0
    )
    job.record("history", history.history)
    job.record("iterations", int(np.asarray(model.optimizer.iterations)))
    return model
