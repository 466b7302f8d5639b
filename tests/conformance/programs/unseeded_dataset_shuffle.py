"""keras.io "Structured data classification from scratch" as written: `Dataset.from_tensor_slices(...)
.shuffle(buffer_size=len(dataframe))`, no seed. Every worker of a job draws its own order of such a
dataset, and kscale gives worker r the batches r, r+N, ... of the order it reads: the parts would overlap
and miss samples, silently. With several workers it stops with a DataError saying to seed the shuffle;
one process (mirrored replicas read one order) trains as it is, on orders no run repeats."""

import numpy as np

from tests.conformance.programs.structured_data_lookup import columns

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = False  # unseeded: no run draws the same orders
EXPECT_ERROR_WITH_WORKERS = "DataError"


def main(job):
    import tensorflow as tf

    keras = job.keras
    features, target = columns(96, seed=2)
    rows = {name: features[name] / np.float32(100.0) for name in ("age", "chol")}
    train_ds = tf.data.Dataset.from_tensor_slices((rows, target)).shuffle(buffer_size=len(target))
    job.seed()
    inputs = {name: keras.Input((1,), name=name) for name in ("age", "chol")}
    hidden = keras.layers.Dense(4, activation="relu")(keras.layers.concatenate(list(inputs.values())))
    model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(hidden))
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.01)), loss="binary_crossentropy")
    model = job.distribute(model)
    model.fit(train_ds.batch(job.batch(8)), epochs=1, verbose=0)
    return model
