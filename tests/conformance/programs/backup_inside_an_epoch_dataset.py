"""BackupAndRestore(save_freq=2) on a tf.data dataset, a fit interrupted inside its second epoch and fit
again with the same backup (generated program 1498 of lane A, seeds' mid-epoch variant).

tf.keras resumes such a backup at its step, with the rest of that epoch read from the dataset's first
batch, and the next epoch from a new pass. A tf.distribute strategy reads the dataset as one stream of
epochs under kscale (a pass each), so every epoch after the resumed one started at another batch: 0.006
off, ranks identical, silently (kscale then refused it). Now kscale resumes at the batch after the backup
in every way, reading that epoch's batches up to it again without training them: every way ends as one
process that was never stopped (job.stops_inside_epochs)."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf")
EXACT = True


def main(job):
    import tensorflow as tf

    keras = job.keras

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == 1 and batch == 4 and job.stops_inside_epochs():
                raise RuntimeError("interrupted")

    x, y = data(64, 4)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(job.batch(4))

    def build():
        job.seed()
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
        )
        model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02), momentum=0.9), loss="mse")
        return job.distribute(model)

    backup = keras.callbacks.BackupAndRestore(job.path("backup"), save_freq=2)
    model = build()
    try:
        model.fit(train, epochs=3, verbose=0, callbacks=[backup, Interrupt()])
    except RuntimeError as err:
        if "interrupted" not in str(err):
            raise
    model = build()
    history = model.fit(train, epochs=3, verbose=0, callbacks=[backup])
    job.record("history", job.history(history, from_epoch=1))
    return model
