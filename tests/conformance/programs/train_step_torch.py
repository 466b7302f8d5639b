"""keras.io "Customizing what happens in fit() with PyTorch": a train_step of one's own that calls
`loss.backward()`, collects `v.value.grad` and calls `self.optimizer.apply(gradients, weights)` under
`torch.no_grad()`, with metrics it keeps itself (its `metrics` property). kscale averages the gradients
wherever the step calls `apply`: two processes train it as one process at the global batch."""

from tests.conformance.harness import data

FAMILIES = ("keras3-torch",)
EXACT = True


def main(job):
    keras = job.keras
    import torch

    class CustomModel(keras.Model):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.loss_tracker = keras.metrics.Mean(name="loss")
            self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
            self.loss_fn = keras.losses.MeanSquaredError()

        def train_step(self, data):
            x, y = data
            self.zero_grad()
            y_pred = self(x, training=True)
            loss = self.loss_fn(y, y_pred)
            loss.backward()
            trainable_weights = [v for v in self.trainable_weights]
            gradients = [v.value.grad for v in trainable_weights]
            with torch.no_grad():
                self.optimizer.apply(gradients, trainable_weights)
            self.loss_tracker.update_state(loss)
            self.mae_metric.update_state(y, y_pred)
            return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

        @property
        def metrics(self):
            return [self.loss_tracker, self.mae_metric]

    x, y = data(64, 5)
    job.seed()
    inputs = keras.Input(shape=(5,))
    outputs = keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs))
    model = CustomModel(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(job.rate(0.01)))
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("iterations", int(model.optimizer.iterations.numpy()))
    return model
