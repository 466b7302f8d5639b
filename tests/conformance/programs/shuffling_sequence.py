"""A keras.utils.Sequence (Keras 3: PyDataset) that reshuffles its samples at every epoch end, as
ImageDataGenerator().flow does by default: training works, and evaluate counts each sample once."""

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = False  # the order is the sequence's own, drawn per epoch


def main(job):
    keras = job.keras
    base = keras.utils.PyDataset if hasattr(keras.utils, "PyDataset") else keras.utils.Sequence

    class Shuffled(base):
        def __init__(self, x, y, batch_size, seed):
            super().__init__()
            self.x, self.y, self.batch_size = x, y, batch_size
            self.rng = np.random.default_rng(seed)
            self.order = self.rng.permutation(len(x))

        def __len__(self):
            return int(np.ceil(len(self.x) / self.batch_size))

        def __getitem__(self, index):
            rows = self.order[index * self.batch_size : (index + 1) * self.batch_size]
            return self.x[rows], self.y[rows]

        def on_epoch_end(self):
            self.order = self.rng.permutation(len(self.x))

    x, y = data(64, 4)
    x_test, y_test = data(40, 4, seed=2)
    y_test[::3] += 50.0  # samples unlike the others: counting one twice or not at all shows
    job.seed()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    model.fit(Shuffled(x, y, job.batch(4), seed=7), epochs=2, verbose=0)
    job.record("evaluate_sequence", model.evaluate(Shuffled(x_test, y_test, job.batch(4), seed=3), verbose=0))
    job.record("evaluate_arrays", model.evaluate(x_test, y_test, batch_size=job.batch(4), verbose=0))
    return model
