"""Ray Train runs a kscale program unchanged, for the Keras of this lane: TorchTrainer (Keras 3 on torch),
TensorflowTrainer with Keras 3 on TensorFlow (where Ray sets TF_USE_LEGACY_KERAS=1 in workers whose
tf.keras is Keras 3 all the same: ray-project/ray#47464), and TensorflowTrainer with a program written
with `tf.keras` where tf_keras is installed (lane B). A local Ray cluster of 2 workers; every rank
compared, and with one process at the global batch from the chief's initial weights."""

from __future__ import annotations

import importlib.util
import json
import sys

import keras
import numpy as np
import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(420)]

DRIVER = "tests/ray_train/workers/ray_driver.py"


#: Where tf_keras is installed (lane B), the program written with `tf.keras` under TensorflowTrainer: with
#: TF_USE_LEGACY_KERAS=1 set before the job starts (tf.keras is tf_keras in every worker), and set by Ray
#: only, after TensorFlow is imported in the workers (tf.keras is Keras 3 there all the same).
#: Elsewhere, the lane's Keras 3 backend.
LEGACY_KERAS_SET = {"before the job (tf_keras)": "1", "by Ray only (Keras 3)": ""}
CASES = (
    [("tf.keras", name) for name in LEGACY_KERAS_SET]
    if importlib.util.find_spec("tf_keras") is not None
    else [(keras.config.backend(), "")]
)


def _one_process_at_the_global_batch(family: str, initial: list) -> list[np.ndarray]:
    """What two workers at batch 4 and rate 0.05 must train: one process at batch 8, rate 0.1, from the
    chief's initial weights, with the Keras the workers' model was made with."""
    if family == "tf_keras":
        import tf_keras as one_process_keras
    else:
        one_process_keras = keras
    model = one_process_keras.Sequential(
        [
            one_process_keras.Input((3,)),
            one_process_keras.layers.Dense(4, activation="tanh"),
            one_process_keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=one_process_keras.optimizers.SGD(0.1), loss="mse")
    model.set_weights([np.asarray(w, np.float32) for w in initial])
    x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
    model.fit(x, x.sum(axis=1, keepdims=True), batch_size=8, epochs=2, shuffle=False, verbose=0)
    return model.get_weights()


@pytest.mark.parametrize("kind, legacy_set", CASES, ids=[f"{k}-{n}" if n else k for k, n in CASES])
def test_ray_train_runs_a_kscale_program_unchanged(launch, tmp_path, kind, legacy_set):
    env = {"TF_USE_LEGACY_KERAS": LEGACY_KERAS_SET[legacy_set]} if kind == "tf.keras" else {}
    done = launch([sys.executable, DRIVER, kind, tmp_path / "out"], timeout=400, **env)
    assert done.returncode == 0, done.stdout[-6000:]
    results = [json.loads((tmp_path / f"out.{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["rank"] for r in results] == [0, 1] and {r["size"] for r in results} == {2}
    assert {r["backend"] for r in results} == {"torch" if kind == "torch" else "multi_worker"}
    if kind == "tf.keras":
        expected = "tf_keras" if LEGACY_KERAS_SET[legacy_set] else "keras"
        assert {r["keras"] for r in results} == {expected}, (
            "the workers' tf.keras is not what TensorFlow made"
        )
    assert results[0]["weights"] == results[1]["weights"]
    assert results[0]["history"] == results[1]["history"] and results[0]["evaluate"] == results[1]["evaluate"]
    reference = _one_process_at_the_global_batch(results[0]["keras"], results[0]["initial_weights"])
    difference = max(
        float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(results[0]["weights"], reference)
    )
    assert difference < 1e-5, (
        f"the Ray job's weights differ from one process at the global batch by {difference}"
    )
