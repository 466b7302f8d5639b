"""An LSTM trained on a PyDataset with fit's default `shuffle=True`, interrupted, then a new model made,
distributed and resumed with BackupAndRestore (found by the program generator: seed 11 on Keras 3
TensorFlow, 0.004 off under mirrored and multi_worker with RMSprop, 0.02 with SGD). Keras 3 makes each
LSTM with a SeedGenerator, which takes its seed from Python's `random`: the copy of the model kscale builds
in a strategy's scope drew one more, and the batch order kscale draws as one process draws it came out
another. kscale keeps the user's random states as they were around its own work
(kscale.seeding.users_random_state_kept)."""

import numpy as np

FAMILIES = ("keras3-tf",)
EXACT = True


def main(job):
    keras = job.keras
    rng = np.random.default_rng(11)
    x = rng.normal(size=(64, 5, 3)).astype("float32")
    features = np.asarray(x, "float32").reshape(64, -1)
    projection = rng.normal(size=(features.shape[1], 3))
    y = (features @ projection[:, :1] + 0.1).astype("float32")

    class Batches(keras.utils.PyDataset):
        def __init__(self, x, y, size):
            super().__init__()
            self.x, self.y, self.size = x, y, size

        def __len__(self):
            return int(np.ceil(len(self.x) / self.size))

        def __getitem__(self, index):
            s, e = index * self.size, (index + 1) * self.size
            return self.x[s:e], self.y[s:e]

    def build():
        """The same model anew, from the same seed: the job that resumes makes its own."""
        job.seed()
        inputs = keras.Input((5, 3))
        hidden = keras.layers.Dense(8, activation="tanh", kernel_regularizer=keras.regularizers.L2(1e-3))(
            keras.layers.LSTM(4)(inputs)
        )
        hidden = keras.layers.ActivityRegularization(l2=1e-3)(hidden)
        model = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(hidden))
        model.compile(
            optimizer=keras.optimizers.SGD(
                keras.optimizers.schedules.ExponentialDecay(job.rate(0.002), decay_steps=3, decay_rate=0.8),
                momentum=0.9,
            ),
            loss="mse",
        )
        return job.distribute(model)

    model = build()

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 1:
                raise RuntimeError("interrupted")

    backup = keras.callbacks.BackupAndRestore(job.path("backup"))
    try:
        model.fit(Batches(x, y, job.batch(4)), epochs=3, verbose=0, callbacks=[backup, Interrupt()])
    except RuntimeError as err:
        if "interrupted" not in str(err):
            raise
    model = build()
    history = model.fit(Batches(x, y, job.batch(4)), epochs=3, verbose=0, callbacks=[backup])
    job.record("history", job.history(history))
    job.record("evaluate", model.evaluate(x, y, batch_size=job.batch(4), verbose=0))
    return model
