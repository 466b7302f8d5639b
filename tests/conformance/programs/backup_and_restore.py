"""keras.io BackupAndRestore: a job dies in epoch 3 and is run again with the same backup folder; it
resumes after the last finished epoch and ends like an uninterrupted run.

Keras 3 across processes (JAX, or TF_CONFIG workers): its BackupAndRestore knows one process only (every
process created, wrote and deleted the one backup folder, and the races hung or aborted the job); under
kscale every process restores and the chief alone writes."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 2:
                raise RuntimeError("interrupted")

    x, y = data(64, 4)

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
        model.fit(
            x, y, batch_size=job.batch(4), epochs=4, shuffle=False, verbose=0, callbacks=[backup, Interrupt()]
        )
    except RuntimeError as err:
        if "interrupted" not in str(err):
            raise
    job.record("weights_when_interrupted", model.get_weights())
    model = build()  # the job started again
    history = model.fit(x, y, batch_size=job.batch(4), epochs=4, shuffle=False, verbose=0, callbacks=[backup])
    job.record("epochs_after_restart", len(history.history["loss"]))
    job.record("iterations", int(model.optimizer.iterations.numpy()))
    return model
