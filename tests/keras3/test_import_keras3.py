"""In a Keras 3 lane, `import kscale` and training stay within the lane's own frameworks."""

from __future__ import annotations

import subprocess
import sys

import keras

SCRIPT = """
import sys
import kscale
assert "tensorflow" not in sys.modules and "jax" not in sys.modules and "horovod" not in sys.modules, sorted(sys.modules)
import keras, numpy as np
np.random.seed(0)  # not keras.utils.set_random_seed: Keras itself imports TensorFlow there when installed
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
kscale.distribute(model, print_plan=False).fit(np.zeros((8, 3)), np.zeros((8, 1)), verbose=0)
print("imported:", "tensorflow" in sys.modules, "horovod" in sys.modules)
"""


def test_import_kscale_loads_no_framework_and_training_no_other_lanes():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    uses_tensorflow = keras.config.backend() == "tensorflow"
    assert f"imported: {uses_tensorflow} False" in done.stdout  # TensorFlow only where it is Keras' backend
