"""A train_step of one's own whose loss is a plain mean (`tf.reduce_mean` of the squared errors, as TensorFlow's
and keras.io's custom-step examples write it for one process) and an SGD optimizer, whose updates follow the
gradient's scale. Keras divides only its own losses by the replicas before summing their gradients; this
one must train at the rate one process at the global batch does, not N times it."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf")
EXACT = True


def main(job):
    keras = job.keras
    import tensorflow as tf

    class MeanLossModel(keras.Model):
        def train_step(self, batch):
            x, y = batch
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = tf.reduce_mean(tf.square(tf.cast(y, y_pred.dtype) - y_pred))
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
            return {"loss": loss}

    x, y = data(64, 5)
    job.seed()
    inputs = keras.Input(shape=(5,))
    model = MeanLossModel(inputs, keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="mse")
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("iterations", int(model.optimizer.iterations.numpy()))
    return model
