"""On this lane's stack: the LSTM example runs unchanged, kscale test passes, and what cannot work is refused."""

from __future__ import annotations

import json
import sys

import pytest

from kscale import frameworks

from .conftest import BIN, HAS_HOROVOD, kscale_run

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(300)]

LSTM = ["examples/lstm/train.py", "--samples", "512", "--epochs", "3", "--units", "8", "--lr", "0.02"]


def _result(output: str) -> dict:
    line = next(line for line in output.splitlines() if "lstm result " in line)
    return json.loads(line.split("lstm result ", 1)[1])


def test_the_lstm_example_runs_unchanged_on_two_replicas(launch, tmp_path):
    report = ["--report", str(tmp_path / "r.{rank}.json")]
    done = launch([BIN / "kscale", "run", "-np", "2", "--", sys.executable, *LSTM, *report])
    ranks = 2
    assert done.returncode == 0, done.stdout[-6000:]
    assert done.stdout.count("kscale plan") == 1  # printed once, by rank 0
    result = _result(done.stdout)
    assert result["replicas"] == 2 and result["epochs_run"] == 3
    reports = [json.loads((tmp_path / f"r.{rank}.json").read_text()) for rank in range(ranks)]
    assert reports[0] == result
    assert len({(r["weights_crc32"], r["eval_loss"]) for r in reports}) == 1, reports  # every rank alike
    assert result["eval_loss"] < 0.6 * result["mean_predictor_loss"], result  # it learned


def test_kscale_test_passes(launch):
    done = launch([BIN / "kscale", "test"])
    assert done.returncode == 0, done.stdout[-6000:]
    assert "kscale test: PASS" in done.stdout


REFUSE = """
import kscale, keras, numpy as np
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
kscale.distribute(model)
print("TRAINED WITHOUT AVERAGING")
"""


def test_keras_3_with_horovod_is_refused_not_silently_unaveraged(launch, tmp_path):
    script = tmp_path / "keras3_under_horovod.py"
    script.write_text(REFUSE)
    if not _has_keras_3():
        # Lane A has no Keras 3: the mirror case, a tf.keras model on the Keras 3 backend, is refused.
        done = launch([sys.executable, "-c", TF_KERAS_ON_JAX])
        assert done.returncode != 0 and "the jax backend trains Keras 3 models" in done.stdout
        return
    if HAS_HOROVOD:  # lane B: a real horovodrun job with a Keras 3 model (TF_USE_LEGACY_KERAS=0 keeps it)
        done = launch(kscale_run("horovod", 2, script), TF_USE_LEGACY_KERAS="0")
    else:  # lane C: the same script where horovodrun's variables say "worker 0 of 2"
        done = launch([sys.executable, script], HOROVOD_RANK="0", HOROVOD_SIZE="2")
    assert done.returncode != 0, done.stdout[-4000:]
    assert "TRAINED WITHOUT AVERAGING" not in done.stdout
    assert "never averages gradients" in done.stdout and "KERAS_BACKEND=jax" in done.stdout


TF_KERAS_ON_JAX = """
import kscale, tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
model.compile(optimizer="sgd", loss="mse")
kscale.distribute(model, backend="jax")
"""


def _has_keras_3() -> bool:
    version = frameworks.version_of("keras")
    return bool(version) and version[0] >= 3
