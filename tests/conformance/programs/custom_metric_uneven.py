"""keras.io "Writing your own metrics": a Metric subclass with its own state, and evaluate on a number of
samples no batch divides (101): every sample counts once."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    ops = keras.ops if hasattr(keras, "ops") else None

    class MeanAbsoluteError(keras.metrics.Metric):
        def __init__(self, name="my_mae", **kwargs):
            super().__init__(name=name, **kwargs)
            self.total = self.add_weight(name="total", initializer="zeros")
            self.count = self.add_weight(name="count", initializer="zeros")

        def update_state(self, y_true, y_pred, sample_weight=None):
            if ops is not None:
                error = ops.abs(ops.cast(y_true, "float32") - ops.cast(y_pred, "float32"))
                self.total.assign_add(ops.sum(error))
                self.count.assign_add(ops.cast(ops.size(error), "float32"))
            else:
                import tensorflow as tf

                error = tf.abs(tf.cast(y_true, "float32") - tf.cast(y_pred, "float32"))
                self.total.assign_add(tf.reduce_sum(error))
                self.count.assign_add(tf.cast(tf.size(error), "float32"))

        def result(self):
            return self.total / self.count

    x, y = data(64, 4)
    x_odd, y_odd = data(101, 4, seed=3)
    y_odd[50:] += 100.0  # the last samples weigh: drop one and the mean moves
    job.seed()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.01)), loss="mse", metrics=[MeanAbsoluteError()])
    model = job.distribute(model)
    model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record(
        "evaluate_101", model.evaluate(x_odd, y_odd, batch_size=job.batch(8), verbose=0, return_dict=True)
    )
    return model
