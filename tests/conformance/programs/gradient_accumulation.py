"""Keras 3's optimizers accumulate gradients themselves: `Adam(..., gradient_accumulation_steps=2)` updates
the weights every 2 steps with the mean of their gradients (kscale's `gradient_accumulation_steps=` option
sets the same on the compiled optimizer). Under a tf.distribute strategy Keras' own TensorFlow trainer
fails with it (a raw RuntimeError from its `Cond`; plain Keras with MirroredStrategy too): kscale stops
there before training with a BackendError naming what works (JAX, torch, or no accumulation); JAX and
torch train it as one process."""

from tests.conformance.harness import data

FAMILIES = ("keras3-tf", "keras3-jax", "keras3-torch")  # tf.keras' optimizers have no such argument
EXACT = True
EXPECT_ERROR_UNDER = {"keras3-tf/mirrored": "BackendError", "keras3-tf/multi_worker": "BackendError"}


def main(job):
    keras = job.keras
    x, y = data(64, 4, seed=2)
    job.seed()
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(job.rate(0.05), momentum=0.5, gradient_accumulation_steps=2),
        loss="mse",
        metrics=["mae"],
    )
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("iterations", int(keras.ops.convert_to_numpy(model.optimizer.iterations)))
    job.record("evaluate", model.evaluate(x, y, verbose=0, return_dict=True))
    return model
