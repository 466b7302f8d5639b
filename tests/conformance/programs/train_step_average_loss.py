"""A train_step whose loss is averaged the way TensorFlow's "Custom training with tf.distribute.Strategy"
averages it: `tf.nn.compute_average_loss` of the per-example losses, which divides by the global batch (the
per-replica batch times the replicas), so the replicas' summed gradients are already their mean. Written
for a strategy, and right in one process too; kscale must not divide those gradients a second time."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf")
EXACT = True


def main(job):
    keras = job.keras
    import tensorflow as tf

    class AverageLossModel(keras.Model):
        def train_step(self, batch):
            x, y = batch
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                per_example = tf.reduce_mean(tf.square(tf.cast(y, y_pred.dtype) - y_pred), axis=-1)
                loss = tf.nn.compute_average_loss(per_example)
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
            return {"loss": loss}

    x, y = data(64, 5)
    job.seed()
    inputs = keras.Input(shape=(5,))
    model = AverageLossModel(inputs, keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="mse")
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("iterations", int(model.optimizer.iterations.numpy()))
    return model
