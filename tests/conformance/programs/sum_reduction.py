"""A loss compiled with `reduction="sum"` (tf.keras: `Reduction.SUM`), as keras.io's guides show the
reduction argument: one process sums the errors of the global batch, so its gradient is the sum of the
replicas' and History's loss is a global batch's sum. 99 samples at 8 per replica: the last step's 3
samples are shared unevenly (2 and 1), and a sum weighs each sample once, however they are shared (with
100, shared 2 and 2, tf.keras' strategies were exact and 67 found them 0.3% off in History's loss: the
generator's seed 0)."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = data(99, 5, seed=7)
    job.seed()
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    if job.family == "keras2":
        loss = keras.losses.MeanSquaredError(reduction=keras.losses.Reduction.SUM)
    else:
        loss = keras.losses.MeanSquaredError(reduction="sum")
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.001)), loss=loss, metrics=["mae"])
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(8), epochs=3, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(x[:96], y[:96], batch_size=job.batch(8), verbose=0))
    return model
