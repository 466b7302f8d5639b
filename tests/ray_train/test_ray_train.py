"""Ray Train runs a kscale program unchanged, for the Keras 3 backend of this lane: TorchTrainer (Keras 3
on torch) and TensorflowTrainer (Keras 3 on TensorFlow, where Ray sets TF_USE_LEGACY_KERAS=1 in workers
whose tf.keras is Keras 3 all the same: ray-project/ray#47464). A local Ray cluster of 2 workers; every
rank compared, and with one process at the global batch."""

from __future__ import annotations

import json
import sys

import keras
import numpy as np
import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(420)]

DRIVER = "tests/ray_train/workers/ray_driver.py"


def _one_process_at_the_global_batch() -> list[np.ndarray]:
    """What two workers at batch 4 and rate 0.05 must train: one process at batch 8, rate 0.1, from the
    chief's initial weights (seed 1)."""
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
    model.fit(x, x.sum(axis=1, keepdims=True), batch_size=8, epochs=2, shuffle=False, verbose=0)
    return model.get_weights()


def test_ray_train_runs_a_kscale_program_unchanged(launch, tmp_path):
    kind = keras.config.backend()
    done = launch([sys.executable, DRIVER, kind, tmp_path / "out"], timeout=400)
    assert done.returncode == 0, done.stdout[-6000:]
    results = [json.loads((tmp_path / f"out.{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["rank"] for r in results] == [0, 1] and {r["size"] for r in results} == {2}
    assert {r["backend"] for r in results} == {"torch" if kind == "torch" else "multi_worker"}
    assert results[0]["weights"] == results[1]["weights"]
    assert results[0]["history"] == results[1]["history"] and results[0]["evaluate"] == results[1]["evaluate"]
    reference = _one_process_at_the_global_batch()
    difference = max(
        float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(results[0]["weights"], reference)
    )
    assert difference < 1e-5, (
        f"the Ray job's weights differ from one process at the global batch by {difference}"
    )
