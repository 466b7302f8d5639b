"""keras.io image classification examples (and Keras Applications) put BatchNormalization in every block:
its moving statistics follow each worker's own batches, which no gradient averaging reaches. Every rank
must still end with the same model (the workers' mean of those statistics), not stop with
RanksDivergedError; not compared with one process, whose statistics come from the global batch."""

from tests.conformance.harness import classes

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = False


def main(job):
    keras = job.keras
    x, y = classes(64, (6, 6, 1), 3)
    job.seed()
    model = keras.Sequential(
        [
            keras.Input((6, 6, 1)),
            keras.layers.Conv2D(4, 3),
            keras.layers.BatchNormalization(),
            keras.layers.Activation("relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="sparse_categorical_crossentropy")
    model = job.distribute(model)
    model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("evaluate", model.evaluate(x, y, verbose=0))
    job.record("predict", model.predict(x[:5], verbose=0))
    return model
