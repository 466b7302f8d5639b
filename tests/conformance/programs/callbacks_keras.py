"""keras.io "Writing your own callbacks" and the callbacks API: ModelCheckpoint(save_best_only),
EarlyStopping(baseline), ReduceLROnPlateau, CSVLogger, TensorBoard and a callback that reads self.model;
code after fit reads their state, which must be the same on every rank."""

import importlib.util

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras

    class WeightNorms(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.norms = []

        def on_epoch_end(self, epoch, logs=None):
            self.norms.append(float(sum(np.sum(np.square(w)) for w in self.model.get_weights())))

    x, y = data(64, 4)
    job.seed()
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.02)), loss="mse")
    model = job.distribute(model)
    suffix = ".keras" if job.family != "keras2" else ".h5"
    checkpoint = keras.callbacks.ModelCheckpoint(
        job.path("best" + suffix), monitor="val_loss", save_best_only=True
    )
    # A baseline no epoch reaches: training stops after patience epochs, on every rank alike.
    stopping = keras.callbacks.EarlyStopping(monitor="val_loss", baseline=1e-6, patience=2)
    plateau = keras.callbacks.ReduceLROnPlateau(
        monitor="loss", factor=0.5, patience=0, min_delta=10.0, verbose=1
    )
    norms = WeightNorms()
    callbacks = [checkpoint, stopping, plateau, keras.callbacks.CSVLogger(job.path("log.csv")), norms]
    if importlib.util.find_spec("tensorboard"):  # Keras 3's lanes may not have it installed
        callbacks.append(keras.callbacks.TensorBoard(job.path("tensorboard")))
    history = model.fit(
        x,
        y,
        batch_size=job.batch(4),
        epochs=6,
        validation_split=0.25,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
    )
    job.record("epochs_run", len(history.history["loss"]))
    job.record("history", job.history(history))
    job.record("checkpoint_best", float(checkpoint.best))
    job.record("stopped_epoch", stopping.stopped_epoch)
    job.record("learning_rate", job.written_rate(model.optimizer.learning_rate))  # as the script wrote it
    job.record("weight_norms", norms.norms)
    if job.rank == 0:
        with open(job.path("log.csv")) as f:
            job.record("chief_csv_lines", len(f.read().splitlines()))
    return model
