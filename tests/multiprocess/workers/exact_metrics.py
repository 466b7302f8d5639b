"""Evaluate, validate and predict on 101 samples with kscale; dump them beside one process's numbers.

exact_metrics.py MODE WORKDIR [OPTIONS_JSON]
  MODE single | mirrored (2 logical CPUs) | horovod (under horovodrun) | multi_worker (TF_CONFIG)
Each rank also evaluates a plain Keras copy of the same weights on all the data, alone: the numbers the
distributed ones must equal. 101 samples do not split evenly over 2 workers, so a dropped or twice-counted
sample shows; AUC and precision are not means of per-worker results.
"""

import json
import os
import sys

import tensorflow as tf

mode, workdir = sys.argv[1], sys.argv[2]
options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    options.update(backend="mirrored", devices=["CPU:0", "CPU:1"])

import numpy as np  # noqa: E402

import kscale  # noqa: E402

SAMPLES, BATCH = 101, 8
rank = kscale.environment.current().rank
rng = np.random.default_rng(0)
x = rng.normal(size=(SAMPLES, 4)).astype("float32")
y = (rng.random(SAMPLES) > 0.5).astype("float32")
weights = rng.random(SAMPLES).astype("float32")


def compile_(model):
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.1),
        loss="binary_crossentropy",
        metrics=[tf.keras.metrics.AUC(name="auc"), tf.keras.metrics.Precision(name="precision")],
        weighted_metrics=[tf.keras.metrics.MeanSquaredError(name="weighted_mse")],
    )


def one_process(model):
    """A plain Keras copy of `model`'s weights: what one process computes on all the data."""
    plain = tf.keras.models.clone_model(model)
    plain.set_weights(model.get_weights())
    compile_(plain)
    return plain


class CountPredicted(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.samples = 0

    def on_predict_batch_end(self, batch, logs=None):
        self.samples += len(np.asarray(logs["outputs"]))


kscale.set_seed(1 if rank == 0 else 7)  # Horovod's rank 1 differs until the broadcast
model = tf.keras.Sequential([tf.keras.layers.Dense(1, activation="sigmoid", input_shape=(4,))])
compile_(model)
model = kscale.distribute(model, print_plan=False, **options)

result = {"replicas": model.kscale_plan.num_replicas}
evaluated = model.evaluate(x, y, sample_weight=weights, batch_size=BATCH, verbose=0, return_dict=True)
reference = one_process(model).evaluate(
    x, y, sample_weight=weights, batch_size=BATCH, verbose=0, return_dict=True
)
result["evaluate"], result["evaluate_one_process"] = evaluated, reference
counter = CountPredicted()
predicted = model.predict(x, batch_size=BATCH, verbose=0, callbacks=[counter])
result["predict_max_error"] = float(np.abs(predicted - one_process(model).predict(x, verbose=0)).max())
result["predict_shape"] = list(predicted.shape)
result["predicted_here"] = counter.samples
history = model.fit(
    x[:60], y[:60], batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
    validation_data=(x[60:], y[60:], weights[60:]),
)  # fmt: skip
result["validation"] = {k[4:]: v[-1] for k, v in history.history.items() if k.startswith("val_")}
plain = one_process(model)
result["validation_one_process"] = plain.evaluate(
    x[60:], y[60:], sample_weight=weights[60:], batch_size=BATCH, verbose=0, return_dict=True
)
with open(os.path.join(workdir, f"result.{rank}.json"), "w") as f:
    json.dump(result, f)
