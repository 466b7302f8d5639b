"""Several processes with Keras 3 (JAX, or TF_CONFIG workers on TensorFlow): a script that runs the framework
before `import kscale` is told how to fix it, not left hanging."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest

from kscale import environment

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]

KSCALE = Path(sys.executable).parent / "kscale"
LATE = """
import keras
keras.ops.ones((2,)) + 1  # JAX runs before kscale could join the job
import kscale
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
kscale.distribute(model)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    env.update(extra)
    return env


def test_several_processes_fail_with_the_fix_not_a_hang(tmp_path):
    script = tmp_path / "late.py"
    script.write_text(LATE)
    if keras.config.backend() == "jax":
        command = [KSCALE, "run", "--engine", "jax", "-np", "2", "--", sys.executable, script]
        done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=100)
        assert done.returncode != 0
        assert "Put `import kscale` at the top of your script" in done.stdout + done.stderr
    else:  # TF_CONFIG workers (the tf engine, kscale run's default for Keras 3 on TensorFlow)
        command = [KSCALE, "run", "-np", "2", "--", sys.executable, script]
        done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=100)
        assert done.returncode != 0
        assert "Put `import kscale` at the top of your script" in done.stdout + done.stderr


@pytest.mark.skipif(
    keras.config.backend() != "tensorflow", reason="MultiWorkerMirroredStrategy is TensorFlow's: lane C-tf"
)
def test_keras_3_multi_worker_fit_still_needs_kscales_fixes():
    """keras-team/keras#20585 as Keras ships it: without kscale's fixes, fit fails on 2 TF_CONFIG workers.
    When a Keras release fixes it, this fails: drop keras3_strategy_fixed for those releases."""
    worker = Path(__file__).parent / "workers" / "plain_multi_worker.py"
    command = [KSCALE, "run", "--engine", "tf", "-np", "2", "--", sys.executable, worker]
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=100)
    assert done.returncode != 0 and "fit ran" not in done.stdout
    assert "PerReplica" in done.stdout + done.stderr  # the tuple reduced in _maybe_symbolic_build
