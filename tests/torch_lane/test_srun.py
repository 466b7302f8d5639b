"""Keras 3 on torch started as SLURM's srun starts tasks: SLURM_PROCID / SLURM_NTASKS say each process's
place, the job script exports MASTER_ADDR and MASTER_PORT, and kscale joins the group itself (two
processes started by hand with srun's variables stand for `srun --ntasks 2`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kscale import environment
from kscale.launch.workers import free_ports

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(180)]

SCRIPT = """
import json, sys
import numpy as np, keras, kscale
keras.utils.set_random_seed(1 + 100 * kscale.rank())  # other weights on every rank: the chief's win
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
model = kscale.distribute(model)
x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
model.fit(x, x.sum(axis=1, keepdims=True), batch_size=4, epochs=1, shuffle=False, verbose=0)
json.dump({"backend": model.kscale_plan.backend, "rank": kscale.rank(), "size": kscale.size(),
           "weights": [w.tolist() for w in model.get_weights()]}, open(f"{sys.argv[1]}.{kscale.rank()}.json", "w"))
"""


def test_two_srun_tasks_with_the_master_exported_train_as_one_job(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    base = {k: v for k, v in os.environ.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_ports(1)[0]), KERAS_BACKEND="torch")
    slurm = {"SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_NNODES": "1", "SLURM_TASKS_PER_NODE": "2"}
    tasks = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "out")],
            env={**base, **slurm, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [task.communicate(timeout=150)[0] for task in tasks]
    assert [task.returncode for task in tasks] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    results = [json.loads((tmp_path / f"out.{rank}.json").read_text()) for rank in (0, 1)]
    assert [(r["backend"], r["rank"], r["size"]) for r in results] == [("torch", 0, 2), ("torch", 1, 2)]
    assert results[0]["weights"] == results[1]["weights"]


def test_srun_tasks_without_a_master_are_told_what_to_export(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    env.update(
        KERAS_BACKEND="torch", SLURM_NTASKS="2", SLURM_STEP_ID="0", SLURM_PROCID="1", SLURM_LOCALID="1"
    )
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "MASTER_ADDR and MASTER_PORT are not set" in done.stderr, done.stderr[-3000:]
