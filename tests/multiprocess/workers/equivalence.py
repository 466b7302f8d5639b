"""Train a small model with SGD and dump the final weights, for the equivalence tests.

equivalence.py reference OUT          one process, plain Keras, batch 2b, lr 2η
equivalence.py mirrored OUT           kscale, MirroredStrategy on 2 logical CPUs, batch b, lr η
horovodrun -np 2 ... equivalence.py horovod OUT   kscale under Horovod, batch b, lr η per rank;
                                      rank 1 starts from different weights (broadcast must fix it)
"""

import json
import sys

mode, out = sys.argv[1], sys.argv[2]

import tensorflow as tf  # noqa: E402

if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

import kscale  # noqa: E402
import kscale.learning_rate  # noqa: E402

BATCH, LR, EPOCHS, SAMPLES = 4, 0.05, 2, 64
LOSS_SCALE = 256.0


def build(seed: int) -> tf.keras.Model:
    kscale.set_seed(seed)
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(8, activation="tanh", input_shape=(5,)),
            tf.keras.layers.Dense(1),
        ]
    )
    return model


rng = np.random.default_rng(0)
x = rng.normal(size=(SAMPLES, 5)).astype("float32")
y = (x @ rng.normal(size=(5, 1)) + 0.1).astype("float32")

rank = kscale.environment.current().rank
model = build(seed=1 if rank == 0 else 99)  # rank 1 differs on purpose
initial = [w.tolist() for w in model.get_weights()]


class Batches(tf.keras.utils.Sequence):
    """The same samples as a keras Sequence of batches of `size`."""

    def __init__(self, x, y, size):
        super().__init__()
        self.x, self.y, self.size = x, y, size

    def __len__(self):
        return len(self.x) // self.size

    def __getitem__(self, i):
        return self.x[i * self.size : (i + 1) * self.size], self.y[i * self.size : (i + 1) * self.size]


class TwoDense(tf.keras.Model):
    """A subclassed model without get_config: kscale cannot rebuild it, so it is built in kscale.scope()."""

    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(8, activation="tanh")
        self.out = tf.keras.layers.Dense(1)

    def call(self, inputs):
        return self.out(self.hidden(inputs))


class LearningRates(tf.keras.callbacks.Callback):
    """The learning rate each step applies: the optimizer keeps the rate as written, and reads the applied
    one (written x the plan's factor, ramped over the warmup by the step count) inside an update, as
    `kscale.learning_rate.Applying` marks it."""

    def __init__(self):
        super().__init__()
        self.applied = []

    def on_train_batch_begin(self, batch, logs=None):
        optimizer = self.model.optimizer
        with kscale.learning_rate.Applying(optimizer):
            self.applied.append(float(tf.keras.backend.get_value(optimizer.learning_rate)))


def loss_scaled(optimizer):
    """A fixed loss scale: the dynamic one that compile() adds by default skips a step whose scaled
    gradients overflow float16, which a batch of 2b and two of b need not do alike."""
    return tf.keras.mixed_precision.LossScaleOptimizer(optimizer, dynamic=False, initial_scale=LOSS_SCALE)


def weights(m) -> list:
    return [w.tolist() for w in m.get_weights()]


result = {"rank": rank, "replicas": kscale.num_replicas(), "initial": initial}
if mode == "reference":
    model.compile(optimizer=tf.keras.optimizers.SGD(2 * LR), loss="mse")
    model.fit(x, y, batch_size=2 * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    result.update(final=weights(model), iterations=int(model.optimizer.iterations.numpy()))
    # What 2 workers accumulating 2 batches of b before each averaged update must match: batch 4b, lr 2η.
    accumulated = build(seed=1)
    accumulated.compile(optimizer=tf.keras.optimizers.SGD(2 * LR), loss="mse")
    accumulated.fit(x, y, batch_size=4 * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    result["accumulate_reference"] = weights(accumulated)
    # The same under Keras' mixed precision (float16 compute, loss scaling).
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    mixed = build(seed=1)
    mixed.compile(optimizer=loss_scaled(tf.keras.optimizers.SGD(2 * LR)), loss="mse")
    mixed.fit(x, y, batch_size=2 * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    tf.keras.mixed_precision.set_global_policy("float32")
    result["mixed_reference"] = weights(mixed)
else:
    options = {"backend": "mirrored", "devices": ["CPU:0", "CPU:1"]} if mode == "mirrored" else {}
    inputs = {
        "numpy": dict(x=x, y=y, batch_size=BATCH),
        "dataset": dict(x=tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)),
        "sequence": dict(x=Batches(x, y, BATCH)),
        # 65 samples / 17 batches: cannot split evenly; every worker must still run the same steps.
        "uneven_numpy": dict(x=np.concatenate([x, x[:1]]), y=np.concatenate([y, y[:1]]), batch_size=BATCH),
        # 17 batches, the last of one sample: not one for each of two replicas, so it stays unused
        "uneven_dataset": dict(
            x=tf.data.Dataset.from_tensor_slices(
                (np.concatenate([x, x[:1]]), np.concatenate([y, y[:1]]))
            ).batch(BATCH)
        ),
    }
    extra = {"warmup": dict(x=x, y=y, batch_size=BATCH)}
    if mode == "horovod":
        extra["fp16_accumulate"] = dict(x=x, y=y, batch_size=BATCH)
    for name, fit_args in {**inputs, **extra}.items():
        net = build(seed=1 if rank == 0 else 99)
        net.compile(optimizer=tf.keras.optimizers.SGD(LR), loss="mse")
        more = dict(compression="fp16", backward_passes_per_step=2) if name == "fp16_accumulate" else {}
        if name == "warmup":
            more = dict(warmup_epochs=1)
        trained = kscale.distribute(net, **options, **more)
        rates = LearningRates()
        history = trained.fit(**fit_args, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[rates])
        result[name] = {
            "final": weights(trained),
            "iterations": int(trained.optimizer.iterations.numpy()),
            "loss": float(history.history["loss"][-1]),
            "plan": trained.kscale_plan.describe(),
            "learning_rates": rates.applied,
        }
    if mode == "horovod":
        # A second fit, after rank 1's weights and momentum were changed: both are broadcast before its
        # first step, so the ranks end equal.
        net = build(seed=1)
        net.compile(optimizer=tf.keras.optimizers.SGD(LR, momentum=0.9), loss="mse")
        trained = kscale.distribute(net)
        trained.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        if rank == 1:
            for variable in [*trained.variables, *trained.optimizer.variables]:
                if variable.dtype.is_floating:
                    variable.assign(variable + 0.5)
        trained.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        result["second_fit"] = {"final": weights(trained)}
    if mode in ("mirrored", "multi_worker"):
        with kscale.scope(**options):
            net = TwoDense()
            net(np.zeros((1, 5), "float32"))
        net.set_weights(build(seed=1 if rank == 0 else 99).get_weights())  # rank 1: the broadcast fixes it
        net.compile(optimizer=tf.keras.optimizers.SGD(LR), loss="mse")
        trained = kscale.distribute(net, **options)
        trained.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
        result["scoped_subclassed"] = {
            "final": weights(trained),
            "iterations": int(trained.optimizer.iterations.numpy()),
            "same_object": trained is net,
        }
    # Keras' mixed precision, with the user's LossScaleOptimizer around SGD: kscale keeps its settings and
    # scales the rate of the optimizer inside it (and under Horovod averages the gradients inside it).
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    net = build(seed=1 if rank == 0 else 99)
    net.compile(optimizer=loss_scaled(tf.keras.optimizers.SGD(LR)), loss="mse")
    trained = kscale.distribute(net, **options)
    trained.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    tf.keras.mixed_precision.set_global_policy("float32")
    result["mixed_precision"] = {
        "final": weights(trained),
        "loss_scaled": isinstance(trained.optimizer, tf.keras.mixed_precision.LossScaleOptimizer),
        "loss_scale": [trained.optimizer.dynamic, float(trained.optimizer.loss_scale.numpy())],
        "learning_rate": float(trained.optimizer.inner_optimizer.learning_rate.numpy())
        * trained.kscale_plan.lr_factor,  # applied: as written x the plan's factor
        "compute_dtype": trained.layers[0].compute_dtype,
    }
    result.update(final=result["numpy"]["final"], iterations=result["numpy"]["iterations"])
    result["replicas"] = kscale.num_replicas()

with open(f"{out}.{rank}.json", "w") as f:
    json.dump(result, f)
