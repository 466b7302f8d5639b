"""keras.io-style data augmentation in a keras.utils.Sequence (Keras 3: PyDataset): the order is seeded,
and every read of a batch adds random noise to its inputs (as ImageDataGenerator's random transforms
do), drawn from the process's own generator, so each worker augments differently. That is no error: the
samples and labels are the ones every worker agrees on; kscale must train it, not take the differing
inputs for an unseeded shuffle."""

import numpy as np

from tests.conformance.harness import classes

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = False  # the noise is drawn per process


def main(job):
    keras = job.keras
    base = keras.utils.PyDataset if hasattr(keras.utils, "PyDataset") else keras.utils.Sequence

    class Augmented(base):
        def __init__(self, x, y, batch_size):
            super().__init__()
            self.x, self.y, self.batch_size = x, y, batch_size
            self.index = np.random.default_rng(5).permutation(len(x))  # seeded: the same on every worker
            self.noise = np.random.default_rng()  # unseeded: each process augments its own way

        def __len__(self):
            return int(np.ceil(len(self.x) / self.batch_size))

        def __getitem__(self, i):
            rows = self.index[i * self.batch_size : (i + 1) * self.batch_size]
            noisy = self.x[rows] + self.noise.normal(0.0, 0.05, self.x[rows].shape).astype("float32")
            return noisy, self.y[rows]

    x, y = classes(64, (6,), 2)
    job.seed()
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(
        optimizer=keras.optimizers.SGD(job.rate(0.05)),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model = job.distribute(model)
    model.fit(Augmented(x, y, job.batch(8)), epochs=2, verbose=0)
    job.record("evaluate", model.evaluate(x, y, verbose=0))
    return model
