"""A tf.keras train_step that updates with `optimizer.minimize(loss, variables, tape=tape)` (Keras 2's own
train_step does this) and its own loss function and loss tracker, compiled with an optimizer only."""

from tests.conformance.harness import data

FAMILIES = ("keras2",)
EXACT = True


def main(job):
    keras = job.keras
    import tensorflow as tf

    loss_tracker = keras.metrics.Mean(name="loss")

    class CustomModel(keras.Model):
        def train_step(self, batch):
            x, y = batch
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x, y, y_pred)
            self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
            loss_tracker.update_state(loss)
            return {"loss": loss_tracker.result()}

        @property
        def metrics(self):
            return [loss_tracker]

    x, y = data(64, 5)
    job.seed()
    inputs = keras.Input(shape=(5,))
    model = CustomModel(inputs, keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="mse")
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("iterations", int(model.optimizer.iterations.numpy()))
    return model
