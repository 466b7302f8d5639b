"""A checkpoint whose optimizer holds kscale's ScaledLearningRate loads in a plain process."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from kscale.keras2.learning_rate import ScaledLearningRate

LOAD = """
import sys
import kscale.learning_rate  # registers ScaledLearningRate with Keras
import tensorflow as tf
model = tf.keras.models.load_model(sys.argv[1])
lr = model.optimizer._learning_rate
print(type(lr).__name__, lr.factor, int(lr.warmup_steps.numpy()), float(lr.base))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["model.keras", "model.h5"])
def test_scaled_learning_rate_round_trips_through_a_saved_model(tmp_path, name):
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
    schedule = ScaledLearningRate(0.05, 4.0)
    schedule.warmup_steps.assign(12)
    model.compile(optimizer=tf.keras.optimizers.SGD(schedule), loss="mse")
    model.fit(np.ones((4, 2), "float32"), np.ones((4, 1), "float32"), verbose=0)
    model.save(tmp_path / name)
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(tmp_path / name)], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-4:] == ["ScaledLearningRate", "4.0", "12", "0.05"]
