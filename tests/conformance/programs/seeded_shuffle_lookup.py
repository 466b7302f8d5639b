"""keras.io "Structured data classification from scratch" as its readers seed it: the dataframe's columns
go into `Dataset.from_tensor_slices((dict(columns), target)).shuffle(len, seed=...)`, then `batch()`; the
lookup and normalization layers are adapted by mapping that same shuffled dataset (one pass over it per
feature), and fit reshuffles it every epoch. One process trains on the orders TensorFlow draws from the
seed, pass after pass: every worker must take its part of exactly those orders, whatever else reads the
dataset before fit or inside the strategy. Validation data shuffled the same way; 102 training rows, so
the last batch is short."""

import numpy as np

from tests.conformance.programs.structured_data_lookup import columns

FAMILIES = ("keras2", "keras3-tf")  # string inputs: Keras 3 on JAX and torch take none
EXACT = True


def main(job):
    import tensorflow as tf

    keras = job.keras
    features, target = columns(122, seed=4)
    features["chol"] = features["chol"] / 100.0  # in mmol/l: float32 sums of squares as exact as age's
    train = {k: v[:102] for k, v in features.items()}
    val = {k: v[102:] for k, v in features.items()}

    def dataframe_to_dataset(frame, labels):
        dataset = tf.data.Dataset.from_tensor_slices((dict(frame), labels))
        return dataset.shuffle(buffer_size=len(labels), seed=1337)

    train_ds = dataframe_to_dataset(train, target[:102]).batch(job.batch(8))
    val_ds = dataframe_to_dataset(val, target[102:]).batch(job.batch(4))

    def adapted(layer, name):
        layer.adapt(train_ds.map(lambda x, y: x[name]))  # as keras.io's encode_*_feature do
        return layer

    job.seed()
    inputs = {
        "thal": keras.Input((1,), name="thal", dtype="string"),
        "sex": keras.Input((1,), name="sex", dtype="int64"),
        "age": keras.Input((1,), name="age"),
        "chol": keras.Input((1,), name="chol"),
    }
    encoded = keras.layers.concatenate(
        [
            adapted(keras.layers.StringLookup(output_mode="one_hot"), "thal")(inputs["thal"]),
            adapted(keras.layers.IntegerLookup(output_mode="one_hot"), "sex")(inputs["sex"]),
            adapted(keras.layers.Normalization(), "age")(inputs["age"]),
            adapted(keras.layers.Normalization(), "chol")(inputs["chol"]),
        ]
    )
    hidden = keras.layers.Dense(8, activation="relu")(encoded)
    output = keras.layers.Dense(1, activation="sigmoid")(hidden)
    model = keras.Model(inputs, output)
    model.compile(
        optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="binary_crossentropy", metrics=["accuracy"]
    )
    model = job.distribute(model)
    history = model.fit(train_ds, epochs=3, validation_data=val_ds, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(val_ds, verbose=0))
    first = tf.data.Dataset.from_tensors({k: v[:4] for k, v in val.items()})  # Keras 3 takes no str arrays
    job.record("predict", model.predict(first, verbose=0))
    job.record("targets", np.asarray(target[:4]))
    return model
