"""Every way a learning rate reaches the optimizer after compile, as scripts write it: keras.io's
`LearningRateScheduler` with absolute rates (`lambda epoch, lr: 0.02 * 0.5**epoch`) and with relative
ones (`lr * 0.5`), `ReduceLROnPlateau(min_lr=...)`, and a callback of one's own that sets
`optimizer.learning_rate` (tf.keras: `backend.set_value(optimizer.lr, ...)`). The rate a script writes is
one worker's: every backend applies it scaled, whenever it is written. Reading it back gives what was
written (so relative schedules and ReduceLROnPlateau compound nothing); History's rate likewise."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = data(96, 5, seed=3)
    job.seed()
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.01), momentum=0.5), loss="mse")
    model = job.distribute(model)

    absolute = keras.callbacks.LearningRateScheduler(lambda epoch, lr: job.rate(0.02) * 0.5**epoch)
    history = model.fit(
        x, y, batch_size=job.batch(8), epochs=3, shuffle=False, verbose=0, callbacks=[absolute]
    )
    job.record("absolute", job.history(history))

    relative = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.8)
    history = model.fit(
        x, y, batch_size=job.batch(8), epochs=2, shuffle=False, verbose=0, callbacks=[relative]
    )
    job.record("relative", job.history(history))

    class SetRate(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            rate = job.rate(0.015) if epoch == 0 else job.rate(0.005)
            if job.family == "keras2":
                keras.backend.set_value(self.model.optimizer.lr, rate)
            else:
                self.model.optimizer.learning_rate = rate

    history = model.fit(
        x, y, batch_size=job.batch(8), epochs=2, shuffle=False, verbose=0, callbacks=[SetRate()]
    )
    job.record("set_directly", history.history)

    plateau = keras.callbacks.ReduceLROnPlateau(
        monitor="loss", factor=0.5, patience=0, min_delta=100.0, min_lr=job.rate(0.004)
    )
    history = model.fit(
        x, y, batch_size=job.batch(8), epochs=4, shuffle=False, verbose=0, callbacks=[plateau]
    )
    job.record("plateau", job.history(history))
    job.record("rate_read_back", job.written_rate(model.optimizer.learning_rate))
    return model
