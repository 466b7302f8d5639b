"""fit on arrays as most scripts call it: `shuffle` left at its default (True), seeded once at the top,
then fit again for a few more epochs (a notebook's "train some more"). One process draws each epoch's
order from the random state Keras uses (NumPy's on JAX, torch's generator, TensorFlow's seeds): the
replicas must train on those very orders, the second fit going on with the random stream. 100 samples at
8 per replica: the last step of each epoch is shared unevenly."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = data(100, 6, seed=13)
    job.seed()
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    first = model.fit(x, y, batch_size=job.batch(8), epochs=2, verbose=0)
    job.record("first", first.history)
    more = model.fit(x, y, batch_size=job.batch(8), epochs=2, verbose=0)
    job.record("more", more.history)
    return model
