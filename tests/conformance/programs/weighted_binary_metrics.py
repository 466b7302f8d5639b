"""keras.io "Imbalanced classification: credit card fraud detection": a binary classifier with AUC, precision
and recall, the rare class weighted up through `sample_weight` in fit, in `validation_data` and in evaluate,
on numbers of samples no batch divides (101; 37 to validate). AUC and precision are not means of the
workers' results and a weighted mean must weigh each sample once. Evaluated before training too: under
tf.keras the ranks begin from other weights until kscale broadcasts the chief's."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    rng = np.random.default_rng(5)
    x = rng.normal(size=(101, 4)).astype("float32")
    scores = x @ np.array([1.0, -2.0, 0.5, 1.0], "float32") + rng.normal(scale=0.5, size=101)
    y = (scores > 1.0).astype("float32")[:, None]  # the rarer class
    weights = (np.where(y[:, 0] > 0, 3.0, 1.0) * (0.5 + rng.random(101))).astype("float32")
    job.seed()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(
        optimizer=keras.optimizers.SGD(job.rate(0.05)),
        loss="binary_crossentropy",
        metrics=[
            keras.metrics.AUC(name="auc"),
            keras.metrics.Precision(name="precision"),
            keras.metrics.Recall(name="recall"),
        ],
        weighted_metrics=[keras.metrics.BinaryAccuracy(name="weighted_accuracy")],
    )
    model = job.distribute(model)
    evaluate = dict(x=x, y=y, sample_weight=weights, batch_size=job.batch(8), verbose=0, return_dict=True)
    job.record("evaluate_before_fit", model.evaluate(**evaluate))
    history = model.fit(
        x[:64],
        y[:64],
        sample_weight=weights[:64],
        batch_size=job.batch(4),
        epochs=2,
        shuffle=False,
        validation_data=(x[64:], y[64:], weights[64:]),
        verbose=0,
    )
    job.record("validation", {k: v for k, v in history.history.items() if k.startswith("val_")})
    job.record("evaluate", model.evaluate(**evaluate))
    job.record("predict", np.asarray(model.predict(x, batch_size=job.batch(8), verbose=0)))
    return model


def _every_metric_measured(records):
    """Each metric took part (AUC on both classes, the weighted one under its own name)."""
    for name in ("auc", "precision", "recall", "weighted_accuracy", "loss"):
        assert name in records["evaluate"] and "val_" + name in records["validation"], name
    assert 0.0 < float(records["evaluate"]["auc"]) < 1.0


CHECKS = (_every_metric_measured,)
