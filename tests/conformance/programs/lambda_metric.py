"""A metric Keras cannot rebuild from its config: `MeanMetricWrapper(lambda y_true, y_pred: ..., name=...)`,
as a script writes a quick metric of its own, in `metrics=[...]` beside built-in ones; evaluated on 106
samples, which no batch divides (trained on 80, validated on 26). Evaluation and validation must use the
user's own metric objects (a copy from the config cannot make the lambda again; keras.io users read
their metric's `result()` afterwards) and count every sample once."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True
#: One process on several JAX devices: its metric, made before the distribution (`import kscale` sets
#: none there), is made again in it from its config, which Keras refuses for a lambda.
EXPECT_ERROR_UNDER = {"jax_devices": "ModelError: compile's"}


def main(job):
    keras = job.keras
    x, y = data(106, 5, seed=4)
    job.seed()
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)]
    )
    mean_y = keras.metrics.MeanMetricWrapper(lambda y_true, y_pred: y_pred - y_true, name="mean_error")
    model.compile(
        optimizer=keras.optimizers.SGD(job.rate(0.02)),
        loss="mse",
        metrics=[mean_y, "mae", keras.metrics.RootMeanSquaredError(name="rmse")],
    )
    model = job.distribute(model)
    job.record(
        "evaluate_before_fit", model.evaluate(x, y, batch_size=job.batch(8), verbose=0, return_dict=True)
    )
    history = model.fit(
        x[:80],
        y[:80],
        batch_size=job.batch(4),
        epochs=2,
        shuffle=False,
        validation_data=(x[80:], y[80:]),
        verbose=0,
    )
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(x, y, batch_size=job.batch(8), verbose=0, return_dict=True))
    job.record("metric_result", float(mean_y.result()))  # the user's own object holds the evaluation's state
    return model
