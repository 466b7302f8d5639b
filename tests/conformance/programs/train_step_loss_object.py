"""keras.io "Customizing what happens in fit()" (Keras 3, TensorFlow), going lower-level: the model keeps a
Loss object, its own loss tracker and metric as attributes, and calls `optimizer.apply` itself. Under a
strategy Keras 3's Loss objects divide their mean by the replicas, which the tracker would log (N times too
small): kscale keeps the loss of a step of the user's own undivided and divides its gradients instead, so
History is one process's; SGD, whose updates follow the gradient's scale."""

from tests.conformance.harness import data

FAMILIES = ("keras3-tf",)
EXACT = True


def main(job):
    keras = job.keras
    import tensorflow as tf

    class CustomModel(keras.Model):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.loss_tracker = keras.metrics.Mean(name="loss")
            self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
            self.loss_fn = keras.losses.MeanSquaredError()

        def train_step(self, batch):
            x, y = batch
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.loss_fn(y, y_pred)
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply(gradients, self.trainable_variables)
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
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)))
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("iterations", int(model.optimizer.iterations.numpy()))
    return model
