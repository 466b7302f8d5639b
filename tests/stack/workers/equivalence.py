"""Train a small model with SGD and dump the weights, in whichever stack (lane) runs it.

equivalence.py reference OUT [R]        plain Keras, one process, batch Rb, lr Rη (R replicas' worth, default 2)
equivalence.py distributed OUT [DEVS]   kscale.distribute, batch b, lr η per replica; DEVS > 1 splits this
                                        process into DEVS devices (logical CPUs for TensorFlow, XLA host
                                        devices for JAX) and names the backend that drives them; under
                                        TF_CONFIG each worker trains DEVS replicas (as with DEVS GPUs each)
equivalence.py rebuilt OUT              as distributed, but the model is built outside the job's
                                        keras.distribution (JAX), with other weights on every process:
                                        kscale rebuilds it there with the chief's weights
MODE+every_sample                       61 samples (the global batch does not divide them) and
                                        data_policy='every_sample': nothing may be dropped
"""

import json
import os
import sys

(mode, _, policy), out = sys.argv[1].partition("+"), sys.argv[2]
devices = int(sys.argv[3]) if len(sys.argv) > 3 else 1
replicas_in_reference = devices if mode == "reference" and devices > 1 else 2
if devices > 1:  # JAX: before JAX starts
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    )

try:
    import tensorflow as tf

    keras = tf.keras
except ImportError:
    import keras

    tf = None

if devices > 1 and tf is not None and mode != "reference":  # before kscale makes a strategy at import
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
    if "TF_CONFIG" in os.environ:
        # MultiWorkerMirroredStrategy drives every GPU of a worker but only one CPU device: to stand for
        # DEVS GPUs per worker, this test (never kscale) hands it the logical CPUs. Private to TensorFlow:
        # the assert fails loudly if a release renames it.
        from tensorflow.python.distribute import collective_all_reduce_strategy as _collective

        extended = _collective.CollectiveAllReduceExtended
        assert hasattr(extended, "_initialize_local_devices"), "TensorFlow renamed _initialize_local_devices"

        def _logical_cpus(self, cluster_resolver, worker_device):
            return tuple(f"{worker_device}/device:CPU:{i}" for i in range(devices)), "CPU"

        extended._initialize_local_devices = _logical_cpus

import numpy as np  # noqa: E402

import kscale  # noqa: E402
from kscale import frameworks  # noqa: E402

jax_backend = frameworks.process_keras().backend == "jax"

BATCH, LR, EPOCHS, SAMPLES = 4, 0.05, 2, 61 if policy == "every_sample" else 64
rng = np.random.default_rng(0)
x = rng.normal(size=(SAMPLES, 5)).astype("float32")
y = (x @ rng.normal(size=(5, 1)) + 0.1).astype("float32")


def build():
    return keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )


kscale.set_seed(1)  # the same initial weights on every rank (JAX requires it; the others broadcast anyway)
if mode == "rebuilt":  # on this process's devices only, from another seed on each process but the chief
    job = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    kscale.set_seed(1 + 100 * kscale.rank())
    model = build()
    keras.distribution.set_distribution(job)
else:
    model = build()
initial = [np.asarray(w).tolist() for w in model.get_weights()]
if mode == "reference":
    model.compile(optimizer=keras.optimizers.SGD(replicas_in_reference * LR), loss="mse")
    model.fit(x, y, batch_size=replicas_in_reference * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
else:
    model.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
    options = {}
    if devices > 1 and "TF_CONFIG" not in os.environ:
        options = (
            {"backend": "jax"}
            if jax_backend
            else {"backend": "mirrored", "devices": [f"CPU:{i}" for i in range(devices)]}
        )
    if policy:
        options["data_policy"] = policy
    model = kscale.distribute(model, **options)
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)

result = {
    "rank": kscale.rank(),
    "replicas": kscale.num_replicas() if mode != "reference" else 1,
    "backend": getattr(model, "kscale_plan", None) and model.kscale_plan.backend,
    "initial": initial,
    "final": [np.asarray(w).tolist() for w in model.get_weights()],
    "iterations": int(np.asarray(model.optimizer.iterations)),
}
with open(f"{out}.{kscale.rank()}.json", "w") as f:
    json.dump(result, f)
