"""SGD with momentum and `global_clipnorm=1.0` (every step clipped, as keras.io's transformer and RNN
examples clip), then `clipnorm` and `clipvalue`: one process clips the global batch's gradient, so each
replica's share must be clipped as that whole, not on its own."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = data(64, 5, seed=23)
    y = y * 5.0  # large errors: every step's gradient is clipped
    records = {}
    for name, clipping in (("global_clipnorm", 1.0), ("clipnorm", 0.5), ("clipvalue", 0.05)):
        job.seed()
        model = keras.Sequential(
            [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
        )
        optimizer = keras.optimizers.SGD(job.rate(0.01), momentum=0.9, **{name: clipping})
        model.compile(optimizer=optimizer, loss="mse")
        model = job.distribute(model)
        history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
        records[name] = history.history
        records[name + "_weights"] = [w for w in model.get_weights()]
    job.record("runs", records)
    return model
