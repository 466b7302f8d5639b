"""keras.io "Customizing what happens in fit() with JAX": a stateless train_step that computes the loss
with `stateless_call`, takes gradients with jax.value_and_grad and applies them with
`optimizer.stateless_apply`, returning the new state."""

from tests.conformance.harness import data

FAMILIES = ("keras3-jax",)
EXACT = True


def main(job):
    keras = job.keras
    import jax

    class CustomModel(keras.Model):
        def loss_and_updates(self, trainable, non_trainable, x, y, training=False):
            y_pred, non_trainable = self.stateless_call(trainable, non_trainable, x, training=training)
            return self.compute_loss(x, y, y_pred), (y_pred, non_trainable)

        def train_step(self, state, data):
            trainable, non_trainable, optimizer_variables, metrics_variables = state
            x, y = data
            grad_fn = jax.value_and_grad(self.loss_and_updates, has_aux=True)
            (loss, (y_pred, non_trainable)), grads = grad_fn(trainable, non_trainable, x, y, True)
            trainable, optimizer_variables = self.optimizer.stateless_apply(
                optimizer_variables, grads, trainable
            )
            new_metrics, logs = [], {}
            start = 0
            for metric in self.metrics:
                end = start + len(metric.variables)
                own = metrics_variables[start:end]
                if metric.name == "loss":
                    own = metric.stateless_update_state(own, loss)
                else:
                    own = metric.stateless_update_state(own, y, y_pred)
                logs[metric.name] = metric.stateless_result(own)
                new_metrics += own
                start = end
            return logs, (trainable, non_trainable, optimizer_variables, new_metrics)

    x, y = data(64, 5)
    job.seed()
    inputs = keras.Input(shape=(5,))
    model = CustomModel(inputs, keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("evaluate", model.evaluate(x, y, verbose=0))
    return model
