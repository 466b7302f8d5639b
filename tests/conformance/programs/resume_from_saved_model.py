"""keras.io "resume training from a saved model" (the FAQ; the timeseries examples' checkpoints): a job
trains and saves, a later job takes keras.models.load_model(path) and fits on from initial_epoch. The
loaded model brings its built optimizer (Adam's moments and step count), which the resumed training must
keep, as in one process, although kscale compiles it again with the rate scaled for the replicas.
AdamW: tf.keras 2.15 saves it as "Custom>AdamW", which kscale's optimizer classes must be saved as too
(generated seed 153 of lane A: "Unknown optimizer: 'AdamW'" on loading, in every way)."""

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = data(64, 4)
    job.seed()
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(job.rate(0.01), weight_decay=0.01), loss="mse", metrics=["mae"]
    )
    model = job.distribute(model)
    model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    path = job.path("model.keras" if job.family != "keras2" else "model.h5")
    model.save(path)

    resumed = job.distribute(keras.models.load_model(path))
    history = resumed.fit(x, y, batch_size=job.batch(4), epochs=4, initial_epoch=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("iterations", int(np.asarray(resumed.optimizer.iterations)))
    job.record("evaluate", resumed.evaluate(x, y, verbose=0))
    return resumed
