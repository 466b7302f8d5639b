"""Horovod's own Keras examples (keras_mnist.py): Sequential without an input shape, compiled, trained; the
model is built on its first batch. Its initializers are seeded (as reproducible scripts do), so the
first batch builds the weights of the one-process run; under tf.keras every rank but the chief draws
other ones, which kscale must make the chief's before the first update (Keras 3 on JAX creates variables
collectively: the same seeds on every process)."""

from tests.conformance.harness import classes

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = classes(64, (5, 5, 1), 3)

    offset = 100 * job.rank if job.family == "keras2" else 0

    def init(seed):
        return keras.initializers.GlorotUniform(seed=seed + offset)

    model = keras.Sequential(
        [
            keras.layers.Conv2D(4, kernel_size=(3, 3), activation="relu", kernel_initializer=init(1)),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax", kernel_initializer=init(2)),
        ]
    )
    model.compile(
        loss="sparse_categorical_crossentropy",
        optimizer=keras.optimizers.SGD(job.rate(0.05)),
        metrics=["accuracy"],
    )
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(x, y, verbose=0))
    return model
