"""Metrics and a loss written as plain functions, as keras.io's guides show them: a named function, a
lambda in `metrics=[...]`, and a loss function of one's own; fit with validation_split, then evaluate.
Functions have no config a copy of the model could be rebuilt from: they must reach every way of running
as they are."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    if hasattr(keras, "ops"):
        ops = keras.ops
    else:  # tf.keras: its backend functions, as its guides wrote them
        import types

        import tensorflow as tf

        backend = keras.backend
        ops = types.SimpleNamespace(
            mean=backend.mean, sqrt=backend.sqrt, square=backend.square, abs=backend.abs, where=tf.where
        )

    def root_mean_squared_error(y_true, y_pred):
        return ops.sqrt(ops.mean(ops.square(y_true - y_pred), axis=-1))

    def huber_like(y_true, y_pred):
        error = ops.abs(y_true - y_pred)
        return ops.mean(ops.where(error < 1.0, 0.5 * ops.square(error), error - 0.5), axis=-1)

    x, y = data(96, 5)
    job.seed()
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(job.rate(0.01)),
        loss=huber_like,
        metrics=[root_mean_squared_error, lambda y_true, y_pred: ops.mean(ops.abs(y_true - y_pred), axis=-1)],
    )
    model = job.distribute(model)
    history = model.fit(
        x, y, batch_size=job.batch(8), epochs=2, validation_split=0.25, shuffle=False, verbose=0
    )
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(x, y, batch_size=job.batch(8), verbose=0, return_dict=True))
    return model
