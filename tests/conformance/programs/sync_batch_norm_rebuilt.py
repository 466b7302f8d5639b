"""A script that trains a model, then builds and trains it again (a second experiment, or a resume after
a crash in the same process: generated program g0565 of tf.keras), with `BatchNormalization(
synchronized=True)` inside a nested model after convolutions. The second model is built outside the
tf.distribute strategy, so kscale copies it into it; tf.keras leaves `synchronized` out of the layer's
config and the copy normalized by each replica's slice alone (0.03-0.1 from one process at the global
batch under mirrored and multi_worker). Compared with one process: weights, moving statistics, evaluate
and predict of the second model."""

from tests.conformance.harness import classes

FAMILIES = ("keras2", "keras3-tf")
EXACT = True


def main(job):
    keras = job.keras
    x, y = classes(64, (6, 6, 2), 3, seed=5)
    x = x * 3.0 + 1.0  # statistics far from the initial moving ones

    def build():
        job.seed()
        inner = keras.Sequential(
            [
                keras.Input((6, 6, 2)),
                keras.layers.Conv2D(4, 3),
                keras.layers.BatchNormalization(synchronized=True, momentum=0.8),
                keras.layers.Activation("relu"),
            ],
            name="inner",
        )
        model = keras.Sequential(
            [
                keras.Input((6, 6, 2)),
                inner,
                keras.layers.Flatten(),
                keras.layers.Dense(3, activation="softmax"),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(job.rate(0.05)),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
        return job.distribute(model)

    build().fit(x, y, batch_size=job.batch(4), epochs=1, shuffle=False, verbose=0)
    model = build()
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(x, y, batch_size=job.batch(8), verbose=0, return_dict=True))
    job.record("predict", model.predict(x[:6], verbose=0))
    return model
