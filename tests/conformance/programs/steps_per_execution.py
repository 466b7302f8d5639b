"""keras.io's performance advice: compile(steps_per_execution=4), several steps per call of the compiled
training function. Keras 3's TensorFlow trainer fails with it under a tf.distribute strategy (Keras' own
bug: "You must feed a value for placeholder tensor", without kscale too): kscale stops there with a
BackendError naming what works (steps_per_execution=1, or Keras 3 on JAX); every other backend trains
it as one process."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax")  # torch: Keras itself takes steps_per_execution=1 only
EXACT = True
EXPECT_ERROR_UNDER = {"keras3-tf/mirrored": "BackendError", "keras3-tf/multi_worker": "BackendError"}


def main(job):
    keras = job.keras
    x, y = data(64, 4)
    job.seed()
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02)), loss="mse", steps_per_execution=4)
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(x, y, verbose=0))
    return model
