"""Every Keras habit on a distributed model, under a real launcher; each rank dumps what it saw.

keras_api.py MODE WORKDIR     MODE: single | mirrored (2 logical CPUs) | horovod | multi_worker
For a Sequential, a functional and a subclassed model: the type, fit with the user's own callbacks
(ModelCheckpoint, EarlyStopping, CSVLogger and one that calls self.model.save), compile() again,
the *_on_batch methods, clone_model, Keras' save_model, tf.saved_model.save, use as a layer, save to a
local and to a ram:// path. Which rank wrote what is counted by spying on kscale's two save routes.
"""

import json
import os
import sys

mode, workdir = sys.argv[1], sys.argv[2]

import tensorflow as tf  # noqa: E402

if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

import kscale  # noqa: E402
from kscale import checkpoint_io  # noqa: E402

rank = kscale.environment.current().rank
saves = {"atomic": [], "scratch": []}
for route in saves:
    real = getattr(checkpoint_io, f"{route}_save")

    def spy(filepath, *args, _real=real, _calls=saves[route], _route=route, **kwargs):
        _calls.append(
            os.path.relpath(str(filepath), workdir) if "://" not in str(filepath) else str(filepath)
        )
        done = _real(filepath, *args, **kwargs)
        # Fails on the chief once written (its last step, the rename, refused): where saving is collective
        # every worker has taken part in the write by then.
        if _route == "atomic" and str(filepath).endswith("unwritable.keras"):
            raise OSError(f"cannot move the written file to {filepath}")
        return done

    setattr(checkpoint_io, f"{route}_save", spy)


@tf.keras.saving.register_keras_serializable(package="kscale_tests")
class TwoLayers(tf.keras.Model):
    def __init__(self, units=4, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.hidden = tf.keras.layers.Dense(units, activation="tanh")
        self.out = tf.keras.layers.Dense(1)

    def call(self, inputs):
        return self.out(self.hidden(inputs))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def build(kind):
    kscale.set_seed(1 if rank == 0 else 99)  # ranks differ until distribute() syncs them
    if kind == "sequential":
        return tf.keras.Sequential(
            [tf.keras.layers.Dense(4, activation="tanh", input_shape=(3,)), tf.keras.layers.Dense(1)]
        )
    if kind == "functional":
        inputs = tf.keras.Input((3,))
        hidden = tf.keras.layers.Dense(4, activation="tanh")(inputs)
        return tf.keras.Model(inputs, tf.keras.layers.Dense(1)(hidden))
    model = TwoLayers()
    model(np.zeros((1, 3), "float32"))
    return model


class SavesTheModel(tf.keras.callbacks.Callback):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        self.model.save(self.path)


def outputs_match(a, b, x) -> bool:
    return bool(np.allclose(np.asarray(a(x)), np.asarray(b(x)), atol=1e-6))


rng = np.random.default_rng(0)
x = rng.normal(size=(32, 3)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5]], "float32") + 0.3).astype("float32")
vx, vy = x[:16] + 0.1, y[:16]
options = {"backend": "mirrored", "devices": ["CPU:0", "CPU:1"]} if mode == "mirrored" else {}
results = {"rank": rank, "replicas": None, "models": {}}

for kind in ("sequential", "functional", "subclassed"):
    folder = os.path.join(workdir, kind)
    model = build(kind)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    distributed = kscale.distribute(model, print_plan=False, **options)
    results["replicas"] = kscale.num_replicas()
    r = {
        "is_users_class": type(distributed) is type(model)
        and isinstance(distributed, tf.keras.Model)
        and isinstance(distributed, type(model)),
    }
    checkpoint = tf.keras.callbacks.ModelCheckpoint(
        os.path.join(folder, "best.keras"), monitor="val_loss", save_best_only=True
    )
    # No epoch improves val_loss by 1e9: it stops after the second epoch, the same on every rank.
    stopping = tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=0, min_delta=1e9)
    history = distributed.fit(
        x,
        y,
        batch_size=4,
        epochs=2,
        validation_data=(vx, vy),
        callbacks=[
            checkpoint,
            stopping,
            SavesTheModel(os.path.join(folder, "by_callback.keras")),
            tf.keras.callbacks.CSVLogger(os.path.join(folder, "log.csv")),
        ],
        shuffle=False,
        verbose=0,
    )
    r.update(
        best=float(checkpoint.best),
        val_loss=[float(v) for v in history.history["val_loss"]],
        history_model_is_it=history.model is distributed,
        stopped_epoch=stopping.stopped_epoch,
    )
    distributed.compile(optimizer=tf.keras.optimizers.Adam(0.001), loss="mse", metrics=["mae"])
    # applied: the rate as written x the plan's factor
    r["learning_rate_after_compile"] = (
        float(distributed.optimizer.learning_rate.numpy()) * distributed.kscale_plan.lr_factor
    )
    # Under Horovod each rank passes its own batch; tf.keras' multi_worker takes the global batch, the
    # same on every rank, and refuses a batch per rank (it would train on parts of each).
    mine = slice(0, 8) if mode == "multi_worker" else slice(8 * rank, 8 * rank + 8)
    if mode == "multi_worker":
        try:
            distributed.train_on_batch(x[8 * rank : 8 * rank + 8], y[8 * rank : 8 * rank + 8])
            r["per_rank_batches_refused"] = False
        except kscale.DataError:
            r["per_rank_batches_refused"] = True
    before_batch = distributed.get_weights()
    r["train_on_batch"] = distributed.train_on_batch(x[mine], y[mine], return_dict=True)
    r["test_on_batch"] = distributed.test_on_batch(x[mine], y[mine], return_dict=True)
    r["predict_on_batch"] = np.asarray(distributed.predict_on_batch(x[:4])).tolist()
    r["weights"] = [w.tolist() for w in distributed.get_weights()]

    clone = tf.keras.models.clone_model(distributed)
    if kind == "subclassed":
        clone(x[:1])
    clone.set_weights(distributed.get_weights())
    r["clone_matches"] = type(clone) is type(model) and outputs_match(clone, distributed, x)
    # What one process reports for every rank's batch together: the *_on_batch numbers must be these.
    everyone = slice(0, 8) if mode == "multi_worker" else slice(0, 8 * kscale.size())
    plain = tf.keras.models.clone_model(distributed)
    if kind == "subclassed":
        plain(x[:1])
    plain.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    plain.set_weights(before_batch)
    r["train_on_batch_one_process"] = plain.evaluate(
        x[everyone], y[everyone], batch_size=64, verbose=0, return_dict=True
    )
    plain.set_weights(distributed.get_weights())
    r["test_on_batch_one_process"] = plain.evaluate(
        x[everyone], y[everyone], batch_size=64, verbose=0, return_dict=True
    )
    r["predict_on_batch_one_process"] = np.asarray(plain.predict(x[:4], verbose=0)).tolist()
    own_path = os.path.join(
        folder, f"keras_save_model.{rank}.keras"
    )  # Keras' own function: every rank writes
    tf.keras.models.save_model(distributed, own_path)
    r["save_model_loads"] = outputs_match(tf.keras.models.load_model(own_path), distributed, x)
    saved_model = os.path.join(folder, f"saved_model.{rank}")
    tf.saved_model.save(distributed, saved_model)
    (served,) = tf.saved_model.load(saved_model).signatures["serving_default"](tf.constant(x)).values()
    r["saved_model_serves"] = bool(np.allclose(served.numpy(), np.asarray(distributed(x)), atol=1e-6))
    outer = tf.keras.Sequential([tf.keras.Input((3,)), distributed, tf.keras.layers.Dense(1)])
    r["nested_runs"] = outer(x).shape == (32, 1)

    distributed.save(os.path.join(folder, "final.keras"))
    distributed.save_weights(os.path.join(folder, "final_weights", "ckpt"))
    distributed.save(f"ram://keras_api/{kind}/final.keras")
    r["ram_written"] = tf.io.gfile.exists(f"ram://keras_api/{kind}/final.keras")
    if rank == 0:
        r["final_loads"] = outputs_match(
            tf.keras.models.load_model(os.path.join(folder, "final.keras")), distributed, x
        )
    results["models"][kind] = r

# A save that fails on the chief stops every worker with it, none left waiting in a collective.
try:
    distributed.save(os.path.join(workdir, "unwritable.keras"))
    results["failed_save"] = None
except Exception as err:  # which class each rank raised is the result
    results["failed_save"] = type(err).__name__
saves["atomic"] = [path for path in saves["atomic"] if "unwritable" not in path]
saves["scratch"] = [path for path in saves["scratch"] if "unwritable" not in path]
results["saves"] = saves
with open(os.path.join(workdir, f"result.{rank}.json"), "w") as f:
    json.dump(results, f)
