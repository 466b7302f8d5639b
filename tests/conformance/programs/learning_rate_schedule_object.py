"""A `LearningRateSchedule` object given to the optimizer (keras.io's `ExponentialDecay`, and a
`CosineDecay` with warmup where Keras 3 has it), trained twice: the schedule keeps decaying from the
optimizer's step count, scaled for the replicas at every step; reading `optimizer.learning_rate` gives the
schedule's own (one worker's) value."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = data(80, 4, seed=5)
    job.seed()
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(6, activation="relu"), keras.layers.Dense(1)]
    )
    schedule = keras.optimizers.schedules.ExponentialDecay(job.rate(0.05), decay_steps=3, decay_rate=0.7)
    model.compile(optimizer=keras.optimizers.Adam(schedule), loss="mse")
    model = job.distribute(model)
    first = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("first", first.history)
    second = model.fit(x, y, batch_size=job.batch(4), epochs=1, shuffle=False, verbose=0)
    job.record("second", second.history)
    job.record("rate_read_back", job.written_rate(model.optimizer.learning_rate))
    return model
