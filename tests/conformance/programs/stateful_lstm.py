"""A stateful LSTM (`LSTM(stateful=True)` on `Input(batch_size=b)`), as keras.io's stateful-RNN examples
write it: each batch's rows go on from the state the previous batch's same rows left, and the state is
reset between epochs (`reset_states` / `reset_state` in a callback). Each replica holds the state of its
rows of the global batch, which, unshuffled, are the same rows of every step. Under tf.distribute
strategies tf.keras cannot train it and Keras 3 on JAX cannot size its state per device: kscale says
which backend does."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf", "keras3-jax")  # Keras 3 on torch cannot train it in one process
EXACT = True
#: tf.keras under a tf.distribute strategy: not implemented by TensorFlow; Keras 3 on JAX: the state is one
#: worker's batch while keras.distribution feeds the global one.
EXPECT_ERROR_UNDER = {
    "keras2/mirrored": "BackendError: a stateful",
    "keras2/multi_worker": "BackendError: a stateful",
    "jax": "BackendError: a stateful",
    "jax_devices": "BackendError: a stateful",
}


def main(job):
    keras = job.keras
    rng = np.random.default_rng(21)
    x = rng.normal(size=(64, 6, 3)).astype("float32")
    y = x.sum(axis=(1, 2))[:, None].astype("float32")
    job.seed()
    batch = job.batch(8)
    model = keras.Sequential(
        [
            keras.Input((6, 3), batch_size=batch),
            keras.layers.LSTM(5, stateful=True),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.01)), loss="mse")
    model = job.distribute(model)

    class ResetStates(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            for layer in self.model.layers:
                if getattr(layer, "stateful", False):
                    (layer.reset_states if job.family == "keras2" else layer.reset_state)()

    history = model.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0, callbacks=[ResetStates()])
    job.record("history", history.history)
    return model
