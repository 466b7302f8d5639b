"""A fit stopped inside its second epoch, after a `BackupAndRestore(save_freq=3)` backup, and fit again with
the same backup, as keras.io's BackupAndRestore example does: arrays, a metric of Keras' and one of the
user's own (a running maximum: `kscale.combine_states`), validation data, then evaluate.

Keras 3 alone starts the stopped epoch again from its first batch with the backup's weights (its first
batches trained twice); tf.keras goes on at the backup's step but on the epoch's data from its first batch,
its metrics from zero. kscale resumes at the batch after the backup: the epoch's batches up to it are read
again, not trained, and the epoch's metrics go on from the states kept beside the backup, so the weights,
History and evaluate are those of one process that was never stopped."""

import numpy as np

from tests.conformance.harness import data
from tests.conformance.programs.metric_running_max import metric_classes

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras

    LargestError = metric_classes(keras)[0]  # a running maximum, declared with kscale.combine_states

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == 1 and batch == 5 and job.stops_inside_epochs():
                raise RuntimeError("interrupted")

    x, y = data(64, 4)
    x_val, y_val = data(20, 4, seed=5)

    def build():
        job.seed()
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(1)]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(job.rate(0.02), momentum=0.9),
            loss="mse",
            metrics=["mae", LargestError()],
        )
        return job.distribute(model)

    def fit(model, callbacks):
        return model.fit(
            x,
            y,
            batch_size=job.batch(4),
            epochs=3,
            shuffle=False,
            validation_data=(x_val, y_val),
            verbose=0,
            callbacks=callbacks,
        )

    backup = keras.callbacks.BackupAndRestore(job.path("backup"), save_freq=3)
    model = build()
    try:
        fit(model, [backup, Interrupt()])
    except RuntimeError as err:
        if "interrupted" not in str(err):
            raise
    model = build()
    history = fit(model, [backup])
    job.record("history", job.history(history, from_epoch=1))
    job.record("evaluate", model.evaluate(x, y, batch_size=job.batch(4), verbose=0))
    job.record("iterations", int(np.asarray(model.optimizer.iterations)))
    return model
