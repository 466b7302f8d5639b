"""keras.io "Customizing what happens in fit()", going lower-level (tf.keras): compile(optimizer) only; the
model keeps its own loss tracker and metric as attributes, computes its own loss with a loss function and
calls apply_gradients. The trackers' state is each worker's own; the weights must still agree.

As in the guide, the loss is per sample (no reduction), so the gradient is of its sum over the batch: one
process at batch 2b sums twice what each of 2 workers at b does, which averaging halves. Adam, the guide's
optimizer, is invariant to that scale (up to its epsilon), so the runs compare; with SGD a summed loss
needs no rate scaling at all (lr_scaling='none'), which kscale cannot tell from the model."""

from tests.conformance.harness import data

FAMILIES = ("keras2",)
EXACT = True


def main(job):
    keras = job.keras
    import tensorflow as tf

    class CustomModel(keras.Model):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.loss_tracker = keras.metrics.Mean(name="loss")
            self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")

        def train_step(self, batch):
            x, y = batch
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = keras.losses.mean_squared_error(y, y_pred)
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
            self.loss_tracker.update_state(loss)
            self.mae_metric.update_state(y, y_pred)
            return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

        @property
        def metrics(self):
            return [self.loss_tracker, self.mae_metric]

    x, y = data(64, 5)
    job.seed()
    inputs = keras.Input(shape=(5,))
    model = CustomModel(inputs, keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs)))
    model.compile(optimizer=keras.optimizers.Adam(job.rate(0.01)))
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("iterations", int(model.optimizer.iterations.numpy()))
    return model
