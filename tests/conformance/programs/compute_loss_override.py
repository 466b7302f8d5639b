"""keras.io's recommended way to change the loss without a train_step: a model overriding `compute_loss`,
here the compiled loss plus an activity penalty `0.05 * mean(y_pred**2)` over the batch. Each replica
computes both on its own batch, as one process does on the global batch: the sum must average like the
compiled loss alone does."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    if job.family == "keras2":
        import tensorflow as tf

        mean, square = tf.reduce_mean, tf.square
    else:
        mean, square = keras.ops.mean, keras.ops.square

    class Penalized(keras.Model):
        if job.family == "keras2":

            def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None):
                loss = super().compute_loss(x, y, y_pred, sample_weight)
                return loss + 0.05 * mean(square(y_pred))

        else:

            def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
                loss = super().compute_loss(x, y, y_pred, sample_weight, training)
                return loss + 0.05 * mean(square(y_pred))

    x, y = data(64, 5, seed=17)
    job.seed()
    inputs = keras.Input((5,))
    outputs = keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs))
    model = Penalized(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(x, y, batch_size=job.batch(4), verbose=0))
    return model
