"""A regression trained on a number of samples no global batch divides (1,003 at 8 per replica: 62 full
steps and a last one of 11 samples), first with per-sample weights and `weighted_metrics`, then without
weights, as keras.io's guides write `fit(x, y, sample_weight=w)`. One process trains on every sample, the
last step's 11 too: so must the replicas, and History (loss, metrics, weighted metrics) must be the one
process's (Keras 3 on JAX: every device computes the whole last step, no padding counted)."""

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = data(1003, 6, seed=11)
    weights = (0.5 + np.random.default_rng(2).random(1003)).astype("float32")
    job.seed()
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(job.rate(0.01)),
        loss="mse",
        metrics=["mae", keras.metrics.RootMeanSquaredError(name="rmse")],
        weighted_metrics=[keras.metrics.MeanAbsoluteError(name="weighted_mae")],
    )
    model = job.distribute(model)
    weighted = model.fit(
        x, y, sample_weight=weights, batch_size=job.batch(8), epochs=2, shuffle=False, verbose=0
    )
    job.record("weighted", weighted.history)
    plain = model.fit(x, y, batch_size=job.batch(8), epochs=1, shuffle=False, verbose=0)
    job.record("plain", plain.history)
    job.record("evaluate", model.evaluate(x, y, sample_weight=weights, batch_size=job.batch(8), verbose=0))
    if not job.reference:
        notes = " ".join(model.kscale_plan.notes)
        if job.family == "keras3-jax":  # one array of every device's batch: the 11 samples on every device
            assert "the last step's 11 samples taken whole by every process" in notes, notes
        else:
            assert "the last step's 11 samples cut in 2 slices" in notes, notes
    return model
