"""Which orders of a seeded, reshuffling tf.data `shuffle()` Keras' fit trains on in one process: the guard
of kscale._keras_private.FitIterators, shared by the tf.keras and Keras 3 lanes' private-API tests."""

from __future__ import annotations

from typing import Any

SAMPLES, BATCH = 12, 4


def orders_fit_trains_on(keras: Any, epochs: int) -> tuple[list[int], int]:
    """(the pass of the dataset each epoch of one process's fit read, the pass a new iterator reads after
    fit), each pass numbered by the iterators made of the dataset since it was built."""
    import tensorflow as tf

    def shuffled() -> tf.data.Dataset:
        return tf.data.Dataset.range(SAMPLES).shuffle(SAMPLES, seed=1)

    reference = shuffled()  # its passes in turn: each iterator made of it draws the next order
    orders = [tuple(int(v) for v in reference) for _ in range(4 * epochs + 4)]
    number = {order: i for i, order in enumerate(orders)}
    read: list[int] = []
    ids = shuffled()
    dataset = (
        ids.map(lambda i: tf.py_function(lambda v: read.append(int(v)) or v, [i], tf.int64))
        .map(lambda i: (tf.reshape(tf.cast(i, "float32"), [1]), tf.reshape(tf.cast(i, "float32"), [1])))
        .batch(BATCH)
    )
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(dataset, epochs=epochs, verbose=0)
    trained = [number.get(tuple(read[k : k + SAMPLES]), -1) for k in range(0, len(read), SAMPLES)]
    return trained, number.get(tuple(int(v) for v in ids), -1)
