"""keras.io's "Customizing what happens in fit()" as written for each backend: a train_step of one's own that
updates the loss metric with the step's loss, one number per step (`metric.update_state(loss)`), on 67
samples, whose last step of 3 is shared unevenly (2 and 1). One process adds the step's mean once; each
replica added its own slice's mean, the 1-sample mean counting as much as the 2-sample one (History's loss
1% off on Keras 3's torch and TensorFlow: generated torch seeds 96 and 498). tf.keras' guide keeps its own
`keras.metrics.Mean` the same way."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = data(67, 5, seed=11)

    if job.family == "keras3-torch":
        import torch

        class OwnStep(keras.Model):
            def train_step(self, data):
                x, y = data
                self.zero_grad()
                y_pred = self(x, training=True)
                loss = self.compute_loss(y=y, y_pred=y_pred)
                loss.backward()
                trainable = list(self.trainable_weights)
                gradients = [v.value.grad for v in trainable]
                with torch.no_grad():
                    self.optimizer.apply(gradients, trainable)
                for metric in self.metrics:
                    if metric.name == "loss":
                        metric.update_state(loss)
                    else:
                        metric.update_state(y, y_pred)
                return {m.name: m.result() for m in self.metrics}

    else:
        import tensorflow as tf

        class OwnStep(keras.Model):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.loss_tracker = keras.metrics.Mean(name="loss")

            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    y_pred = self(x, training=True)
                    loss = keras.losses.mean_squared_error(y, y_pred)
                    loss = tf.reduce_mean(loss)
                gradients = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
                self.loss_tracker.update_state(loss)
                return {"loss": self.loss_tracker.result()}

            @property
            def metrics(self):
                return [self.loss_tracker]

    job.seed()
    inputs = keras.Input(shape=(5,))
    outputs = keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs))
    model = OwnStep(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="mse")
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    return model
