"""keras.io's ImageDataGenerator().flow-shaped data: a keras.utils.Sequence (Keras 3: PyDataset) that
shuffles its samples with an unseeded permutation in __init__. In one process it trains. Across workers
each process holds another order, and kscale cuts the batches by index: the parts would overlap and miss
samples (evaluate saw accuracy 0.463 where the arrays give 0.480). Every rank stops with a DataError
saying to seed the shuffle, as for arrays."""

import numpy as np

from tests.conformance.harness import classes

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = False  # the order of the samples is drawn per process
EXPECT_ERROR_WITH_WORKERS = "DataError"


def main(job):
    keras = job.keras
    base = keras.utils.PyDataset if hasattr(keras.utils, "PyDataset") else keras.utils.Sequence

    class Flow(base):
        def __init__(self, x, y, batch_size):
            super().__init__()
            self.x, self.y, self.batch_size = x, y, batch_size
            self.index = np.random.default_rng().permutation(len(x))  # unseeded, as flow() shuffles

        def __len__(self):
            return int(np.ceil(len(self.x) / self.batch_size))

        def __getitem__(self, i):
            rows = self.index[i * self.batch_size : (i + 1) * self.batch_size]
            return self.x[rows], self.y[rows]

    x, y = classes(64, (6,), 2)
    job.seed()
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(
        optimizer=keras.optimizers.SGD(job.rate(0.05)),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model = job.distribute(model)
    model.fit(Flow(x, y, job.batch(8)), epochs=1, verbose=0)
    job.record("evaluate", model.evaluate(Flow(x, y, job.batch(8)), verbose=0))
    return model
