"""keras.io's text classification from scratch, bag-of-words form: an `Embedding(5000, 16)` averaged over
the tokens and a classifier, trained with Adam. The embedding's gradient is sparse (the rows of the
batch's tokens): the replicas' sparse gradients must add up to one process's."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    rng = np.random.default_rng(29)
    tokens = rng.integers(1, 50, size=(96, 20)).astype("int32")
    labels = (tokens[:, :3].sum(axis=1) % 2).astype("float32")
    job.seed()
    model = keras.Sequential(
        [
            keras.Input((20,), dtype="int32"),
            keras.layers.Embedding(50, 16),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(job.rate(0.01)), loss="binary_crossentropy", metrics=["accuracy"]
    )
    model = job.distribute(model)
    history = model.fit(tokens, labels, batch_size=job.batch(8), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    return model
