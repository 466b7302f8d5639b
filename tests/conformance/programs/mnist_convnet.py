"""keras.io "Simple MNIST convnet": Sequential with an input shape, numpy arrays, validation_split,
evaluate printing "Test loss" and "Test accuracy" from the list it returns, then predict."""

from tests.conformance.harness import classes

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = classes(96, (6, 6, 1), 3)
    x_test, y_test = classes(41, (6, 6, 1), 3, seed=1)
    job.seed()
    model = keras.Sequential(
        [
            keras.Input(shape=(6, 6, 1)),
            keras.layers.Conv2D(4, kernel_size=(3, 3), activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    model.compile(
        loss="sparse_categorical_crossentropy",
        optimizer=keras.optimizers.SGD(job.rate(0.05)),
        metrics=["accuracy"],
    )
    model = job.distribute(model)
    history = model.fit(
        x, y, batch_size=job.batch(4), epochs=2, validation_split=0.25, shuffle=False, verbose=0
    )
    score = model.evaluate(x_test, y_test, verbose=0)
    job.record("history", history.history)
    job.record("test_loss_then_accuracy", score)
    job.record("predict", model.predict(x_test, verbose=0))
    return model
