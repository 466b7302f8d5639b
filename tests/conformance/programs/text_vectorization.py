"""keras.io "Text classification from scratch": raw strings, a `TextVectorization` layer with a custom
standardization function, adapted to the training texts, applied in the tf.data pipeline (`ds.map`) for
training; an Embedding, Conv1D and global max pooling classifier; then the example's end-to-end model, the
vectorization layer and the trained model in a new model taking raw strings, compiled and evaluated as
it is (not distributed). The vocabulary lives in a table, not a variable."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf")  # string inputs: Keras 3 on JAX and torch take none
EXACT = True

WORDS = ["good", "great", "fine", "bad", "awful", "poor", "movie", "plot", "actor", "scene", "the", "a"]


def reviews(samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(samples):
        words = rng.choice(WORDS, size=int(rng.integers(4, 9)))
        score = sum(w in ("good", "great", "fine") for w in words) - sum(
            w in ("bad", "awful", "poor") for w in words
        )
        texts.append("<br />".join([" ".join(words[:3]), " ".join(words[3:]).upper()]))
        labels.append(float(score > 0))
    return np.array(texts), np.array(labels, "float32")


def main(job):
    keras = job.keras
    import re
    import string

    import tensorflow as tf

    def custom_standardization(input_data):
        lowercase = tf.strings.lower(input_data)
        stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
        return tf.strings.regex_replace(stripped_html, f"[{re.escape(string.punctuation)}]", "")

    texts, labels = reviews(96)
    raw_train_ds = tf.data.Dataset.from_tensor_slices((texts[:80], labels[:80])).batch(job.batch(8))
    raw_val_ds = tf.data.Dataset.from_tensor_slices((texts[80:], labels[80:])).batch(job.batch(4))

    vectorize_layer = keras.layers.TextVectorization(
        standardize=custom_standardization, max_tokens=20, output_mode="int", output_sequence_length=10
    )
    vectorize_layer.adapt(raw_train_ds.map(lambda x, y: x))

    def vectorize_text(text, label):
        return vectorize_layer(tf.expand_dims(text, -1)), label

    train_ds = raw_train_ds.map(vectorize_text)
    val_ds = raw_val_ds.map(vectorize_text)

    job.seed()
    inputs = keras.Input(shape=(None,), dtype="int64")
    x = keras.layers.Embedding(20, 8)(inputs)
    x = keras.layers.Conv1D(8, 3, padding="valid", activation="relu", strides=1)(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    predictions = keras.layers.Dense(1, activation="sigmoid", name="predictions")(x)
    model = keras.Model(inputs, predictions)
    model.compile(
        loss="binary_crossentropy", optimizer=keras.optimizers.Adam(job.rate(0.01)), metrics=["accuracy"]
    )
    model = job.distribute(model)
    history = model.fit(train_ds, validation_data=val_ds, epochs=2, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(val_ds, verbose=0))

    string_input = keras.Input(shape=(1,), dtype="string")
    end_to_end_model = keras.Model(string_input, model(vectorize_layer(string_input)))
    end_to_end_model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    job.record("end_to_end", end_to_end_model.evaluate(raw_val_ds, verbose=0))
    new_reviews = tf.constant([["a great movie"], ["an awful plot"]])
    job.record("predict", end_to_end_model.predict(new_reviews, verbose=0))
    return model
