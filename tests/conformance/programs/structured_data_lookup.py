"""keras.io "Structured data classification from scratch": a dict of named feature columns, each encoded
inside the model by a preprocessing layer adapted to the training data (StringLookup and IntegerLookup
one-hot, Normalization), concatenated into a small Dense classifier, trained from a tf.data dataset of
(dict of columns, target) batches, as the example builds it from its dataframe.
The lookup layers keep their vocabulary in tables, not variables: kscale's broadcast, its same-weights
check and any copy of the model must take them as they are."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf")  # string inputs: Keras 3 on JAX and torch take none
EXACT = True


def columns(samples: int, seed: int = 0) -> tuple[dict, np.ndarray]:
    rng = np.random.default_rng(seed)
    thal = rng.choice(["fixed", "normal", "reversible"], size=samples)
    sex = rng.integers(0, 2, size=samples)
    age = rng.normal(55.0, 9.0, size=samples).astype("float32")
    chol = rng.normal(240.0, 50.0, size=samples).astype("float32")
    score = (thal == "reversible") * 1.0 + 0.8 * sex + (age - 55.0) / 20.0 + rng.normal(0, 0.3, samples)
    features = {
        "thal": thal.reshape(-1, 1),
        "sex": sex.reshape(-1, 1).astype("int64"),
        "age": age.reshape(-1, 1),
        "chol": chol.reshape(-1, 1),
    }
    return features, (score > 1.0).astype("float32").reshape(-1, 1)


def main(job):
    keras = job.keras
    features, target = columns(96)
    train = {k: v[:80] for k, v in features.items()}
    val = {k: v[80:] for k, v in features.items()}
    job.seed()
    inputs = {
        "thal": keras.Input((1,), name="thal", dtype="string"),
        "sex": keras.Input((1,), name="sex", dtype="int64"),
        "age": keras.Input((1,), name="age"),
        "chol": keras.Input((1,), name="chol"),
    }
    thal = keras.layers.StringLookup(output_mode="one_hot")
    thal.adapt(train["thal"])
    sex = keras.layers.IntegerLookup(output_mode="one_hot")
    sex.adapt(train["sex"])
    age, chol = keras.layers.Normalization(), keras.layers.Normalization()
    age.adapt(train["age"])
    chol.adapt(train["chol"])
    encoded = keras.layers.concatenate(
        [thal(inputs["thal"]), sex(inputs["sex"]), age(inputs["age"]), chol(inputs["chol"])]
    )
    hidden = keras.layers.Dense(8, activation="relu")(encoded)
    output = keras.layers.Dense(1, activation="sigmoid")(hidden)
    model = keras.Model(inputs, output)
    model.compile(
        optimizer=keras.optimizers.Adam(job.rate(0.01)), loss="binary_crossentropy", metrics=["accuracy"]
    )
    model = job.distribute(model)
    import tensorflow as tf

    train_ds = tf.data.Dataset.from_tensor_slices((train, target[:80])).batch(job.batch(8))
    val_ds = tf.data.Dataset.from_tensor_slices((val, target[80:])).batch(job.batch(4))
    history = model.fit(train_ds, epochs=2, validation_data=val_ds, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(val_ds, verbose=0))
    first = {k: v[:4] for k, v in val.items()}
    job.record("predict", model.predict(tf.data.Dataset.from_tensors(first), verbose=0))
    return model
