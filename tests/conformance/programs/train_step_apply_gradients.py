"""keras.io "Customizing what happens in fit()" (TensorFlow): train_step computes the loss under a
GradientTape and calls `self.optimizer.apply_gradients` itself, then updates the metrics. Its History is one process's: under a strategy Keras 3 divides the loss by the
replicas, and kscale keeps it undivided in a step of the user's own (dividing the gradients instead).
An RMSE, whose result is not linear in its state: Keras 3 returns the compiled metrics as one nested dict,
whose results an epoch's logs must read from the replicas' combined states, not average (0.005 off, seeds
298, 360, 361 of the generator on C-tf)."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf")
EXACT = True


def main(job):
    keras = job.keras
    import tensorflow as tf

    class CustomModel(keras.Model):
        def train_step(self, batch):
            x, y = batch
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(y=y, y_pred=y_pred)
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    x, y = data(64, 5)
    job.seed()
    inputs = keras.Input(shape=(5,))
    outputs = keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs))
    model = CustomModel(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.SGD(job.rate(0.05)),
        loss="mse",
        metrics=["mae", keras.metrics.RootMeanSquaredError()],
    )
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("evaluate", model.evaluate(x, y, verbose=0))
    job.record("iterations", int(model.optimizer.iterations.numpy()))
    job.record("history", history.history)  # the loss the step tracks: one process's, on every backend
    return model
