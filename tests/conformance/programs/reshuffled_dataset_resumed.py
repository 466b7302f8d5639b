"""keras.io BackupAndRestore with a tf.data input pipeline: `Dataset.from_tensor_slices(...).shuffle(n,
seed=...)` (a new order every epoch), a fit interrupted by an error in epoch 2 and fit again, in the same
script, on the same dataset object (generated program 101 of Keras 3 on TensorFlow).

Such a shuffle draws the next order for every iterator made of the dataset, and under a tf.distribute
strategy the workers read ahead of the step that failed: they had drawn more orders than one process had,
and the second fit trained on other orders (0.08-0.33 off, ranks identical). That fit stops with a
DataError saying to make the dataset again (a restarted job does) or not to reshuffle; where kscale reads
the dataset as one process does (Horovod, JAX, torch), the resumed run is one process's."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True
EXPECT_ERROR_UNDER = {way: "DataError" for way in ("multi_worker", "mirrored")}


def main(job):
    import tensorflow as tf

    keras = job.keras

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 1:
                raise RuntimeError("interrupted")

    x, y = data(64, 4)
    train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=5).batch(job.batch(4))

    def build():
        job.seed()
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
        )
        model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02), momentum=0.9), loss="mse")
        return job.distribute(model)

    backup = keras.callbacks.BackupAndRestore(job.path("backup"))
    model = build()
    try:
        model.fit(train, epochs=3, verbose=0, callbacks=[backup, Interrupt()])
    except RuntimeError as err:
        if "interrupted" not in str(err):
            raise
    model = build()
    history = model.fit(train, epochs=3, verbose=0, callbacks=[backup])
    job.record("history", job.history(history))
    return model
