"""Several processes with Keras 3: on JAX, a script that runs JAX before `import kscale` is told how to fix
it; on TensorFlow, where Keras 3 trains in one process, `kscale run -np 2` says so and names what works."""

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
    else:
        command = [KSCALE, "run", "-np", "2", "--", sys.executable, script]
        done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=100)
        assert done.returncode == 2
        assert "Keras 3 on tensorflow trains in one process here" in done.stderr
        assert "KERAS_BACKEND=jax" in done.stderr and "kscale[tf218]" in done.stderr
