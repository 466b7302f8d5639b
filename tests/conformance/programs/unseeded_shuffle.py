"""keras.io "Timeseries classification from scratch": the arrays are shuffled with an unseeded
`np.random.permutation` before `fit(validation_split=0.2)`. In one process it trains. Across workers each
process shuffles differently, so the parts kscale cuts would overlap and miss samples, and one worker's
validation samples would be another's training samples: every rank stops with a DataError saying to seed
the shuffle (or, for parts loaded per worker on purpose, data_policy='none')."""

import numpy as np

from tests.conformance.harness import classes

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = False  # the order of the samples is drawn per process
EXPECT_ERROR_WITH_WORKERS = "DataError"


def main(job):
    keras = job.keras
    x, y = classes(96, (16, 1), 2)
    unseeded = np.random.default_rng()  # the example's np.random.permutation, before any seed
    idx = unseeded.permutation(len(x))
    x, y = x[idx], y[idx]
    job.seed()
    inputs = keras.Input((16, 1))
    hidden = keras.layers.Conv1D(8, 3, padding="same", activation="relu")(inputs)
    outputs = keras.layers.Dense(2, activation="softmax")(keras.layers.GlobalAveragePooling1D()(hidden))
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(job.rate(0.01)),
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    model = job.distribute(model)
    model.fit(x, y, batch_size=job.batch(8), epochs=2, validation_split=0.2, verbose=0)
    return model
