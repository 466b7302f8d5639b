"""keras.io "Making new layers and models via subclassing": a Model subclass with its own layers and call(),
built by calling it on a batch, with a get_config returning its __init__ arguments."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras

    class MLP(keras.Model):
        def __init__(self, units=8, **kwargs):
            super().__init__(**kwargs)
            self.units = units
            self.hidden = keras.layers.Dense(units, activation="relu")
            self.out = keras.layers.Dense(1)

        def call(self, inputs):
            return self.out(self.hidden(inputs))

        def get_config(self):
            return {**super().get_config(), "units": self.units}

    x, y = data(64, 5)
    job.seed()
    model = MLP(units=8)
    model(x[:1])
    model.compile(optimizer=keras.optimizers.Adam(job.rate(0.01)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(x, y, verbose=0))
    return model
