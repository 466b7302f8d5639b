"""A model a distributed job saves loads in a plain process, without kscale, with the rate as written."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

LOAD = """
import sys
import tensorflow as tf
model = tf.keras.models.load_model(sys.argv[1])
print(type(model.optimizer).__name__, float(tf.keras.backend.get_value(model.optimizer.learning_rate)))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["model.keras", "model.h5"])
def test_a_saved_model_loads_without_kscale_with_the_rate_as_written(distribute_as_worker, tmp_path, name):
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    distributed = distribute_as_worker(model, num_workers=4)
    distributed.fit(np.ones((8, 2), "float32"), np.ones((8, 1), "float32"), batch_size=2, verbose=0)
    distributed.save(tmp_path / name)
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(tmp_path / name)], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["SGD", "0.05000000074505806"]
