"""keras.io's older examples and data guides: Python generators of batches, looping over the data for ever,
with steps_per_epoch (and validation_steps, steps). Every worker reads the whole generator and keeps its
replicas' batches (batch i for replica i mod 2), so that each step trains on two consecutive batches,
the samples one process at the global batch takes as one; the steps the script gives for its batch are
divided by the replicas. The generator goes on from epoch to epoch and from fit to evaluate."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def batches(x, y, size):
    while True:
        for start in range(0, len(x), size):
            yield x[start : start + size], y[start : start + size]


def main(job):
    keras = job.keras
    x, y = data(64, 4)
    vx, vy = data(24, 4, seed=2)
    job.seed()
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    history = model.fit(
        batches(x, y, job.batch(4)),
        steps_per_epoch=job.steps(16),  # 64 samples at 4 a batch
        epochs=2,
        validation_data=batches(vx, vy, job.batch(4)),
        validation_steps=job.steps(6),
        verbose=0,
    )
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(batches(vx, vy, job.batch(4)), steps=job.steps(6), verbose=0))
    return model
