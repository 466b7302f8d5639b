"""Metrics of one's own, as keras.io's "writing your own metrics" guide writes them: a `Metric` subclass
whose state is a running maximum of the absolute error, declared with `kscale.combine_states` (its states
combine by their maximum), beside one whose state is a sum (Keras' default, right without a word), and
the same maximum undeclared, which kscale sums and the plan and a warning say so (not compared)."""

import kscale
from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def metric_classes(keras):
    if hasattr(keras, "ops"):
        ops = keras.ops
        maximum, reduce_max, absolute, reduce_sum, cast = ops.maximum, ops.max, ops.abs, ops.sum, ops.cast
    else:
        import tensorflow as tf

        maximum, reduce_max, absolute, reduce_sum, cast = (
            tf.maximum,
            tf.reduce_max,
            tf.abs,
            tf.reduce_sum,
            tf.cast,
        )

    def running_max():
        class RunningMax(keras.metrics.Metric):
            def __init__(self, name="running_max", **kwargs):
                super().__init__(name=name, **kwargs)
                self.max_value = self.add_weight(name="max_value", shape=(), initializer="zeros")

            def update_state(self, y_true, y_pred, sample_weight=None):
                error = absolute(cast(y_true, y_pred.dtype) - y_pred)
                self.max_value.assign(maximum(self.max_value, reduce_max(error)))

            def result(self):
                return self.max_value * 1.0  # a tensor: Keras 3 on JAX takes no variable as a result

            def reset_state(self):
                self.max_value.assign(0.0)

        return RunningMax

    class SquaredTotal(keras.metrics.Metric):
        def __init__(self, name="squared_total", **kwargs):
            super().__init__(name=name, **kwargs)
            self.total = self.add_weight(name="total", shape=(), initializer="zeros")

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.total.assign_add(reduce_sum((cast(y_true, y_pred.dtype) - y_pred) ** 2))

        def result(self):
            return self.total * 1.0

    # The same maximum twice: declared, and declaring nothing (a subclass would inherit a declaration)
    return kscale.combine_states(max_value="max")(running_max()), SquaredTotal, running_max()


def main(job):
    keras = job.keras
    RunningMax, SquaredTotal, Undeclared = metric_classes(keras)
    x, y = data(67, 4, seed=31)
    job.seed()
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(job.rate(0.02)),
        loss="mse",
        metrics=[RunningMax(), SquaredTotal(), Undeclared(name="undeclared")],
    )
    model = job.distribute(model)
    history = model.fit(
        x, y, batch_size=job.batch(4), epochs=2, validation_split=0.25, verbose=0, shuffle=False
    )
    job.record("history", {k: v for k, v in history.history.items() if "undeclared" not in k})
    result = model.evaluate(x, y, batch_size=job.batch(4), verbose=0, return_dict=True)
    job.record("evaluate", {k: v for k, v in result.items() if "undeclared" not in k})
    if not job.reference and job.family != "keras3-jax":  # JAX: every step's metrics are the global batch's
        notes = " ".join(model.kscale_plan.notes)
        assert "undeclared (RunningMax): their states are summed" in notes, notes
        assert "running_max (" not in notes, notes
    return model
