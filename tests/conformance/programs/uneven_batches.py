"""Data whose batches do not fill the last step, fed as keras.io's guides feed it: a keras.utils.Sequence
(Keras 3: PyDataset) of `ceil(len(x) / batch_size)` batches, the last one short, and, where the family has
one, a torch DataLoader or a `tf.data` pipeline's `batch()`. 38 samples at 16 per replica make batches of
16, 16 and 6; one process at the global batch (32) trains on 32 and then on 6. The last step's samples are
shared by the replicas (3 each), not dropped, and a short batch's mean is not averaged with a full one's
(54 in tf.data: 16, 16, 16, 6, whose last 22 are 11 each): trained as one process, evaluated exactly.
`shuffle=False` keeps the batches in order, as one process takes them: with fit's default shuffle, Keras
draws the order of one process's batches from Python's `random`, and kscale the order of the workers'
steps from the epoch, alike on every worker."""

import math

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    base = keras.utils.PyDataset if hasattr(keras.utils, "PyDataset") else keras.utils.Sequence

    class Batches(base):
        def __init__(self, x, y, batch_size):
            super().__init__()
            self.x, self.y, self.batch_size = x, y, batch_size

        def __len__(self):
            return math.ceil(len(self.x) / self.batch_size)

        def __getitem__(self, i):
            rows = slice(i * self.batch_size, (i + 1) * self.batch_size)
            return self.x[rows], self.y[rows]

    x, y = data(38, 4)
    vx, vy = data(21, 4, seed=3)
    job.seed()
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    history = model.fit(
        Batches(x, y, job.batch(16)),
        validation_data=Batches(vx, vy, job.batch(8)),
        epochs=2,
        shuffle=False,
        verbose=0,
    )
    job.record("history", history.history)

    if job.family == "keras3-torch":  # 16, 16, 6 as a DataLoader's batches
        import torch

        pairs = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
        model.fit(torch.utils.data.DataLoader(pairs, batch_size=job.batch(16)), epochs=1, verbose=0)
    else:  # every backend reads tf.data (keras.io feeds it on JAX and torch too)
        import tensorflow as tf

        x54, y54 = data(54, 4, seed=5)
        model.fit(tf.data.Dataset.from_tensor_slices((x54, y54)).batch(job.batch(16)), epochs=1, verbose=0)
    job.record("evaluate", model.evaluate(Batches(vx, vy, job.batch(8)), verbose=0))
    return model
