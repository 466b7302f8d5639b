"""Keras 3 on torch under torchrun (`kscale run --engine torch`): a worker that dies ends the job within
seconds, and a job under an already initialized process group (as Ray Train's TorchTrainer makes it)
trains with kscale's averaging, ranks identical."""

from __future__ import annotations

import sys
import time

import pytest

from tests.conftest import crash_report
from tests.stack.conftest import BIN

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(180)]


def test_a_worker_that_dies_ends_the_job_within_seconds(launch):
    started = time.monotonic()
    command = [BIN / "kscale", "run", "--engine", "torch", "-np", "2", "--"]
    done = launch([*command, sys.executable, "-m", "kscale.selftest", "--fail-rank", "1", "--fail-code", "3"])
    took = time.monotonic() - started
    assert done.returncode != 0, done.stdout[-3000:]
    assert "exiting with status 3 after joining the job" in done.stdout, done.stdout[-3000:]  # it had started
    assert "kscale selftest PASS" not in done.stdout  # rank 0 was stopped, not left to finish alone
    assert took < 60, f"the job took {took:.0f} s to end after a worker died"


GROUP_FIRST = """
import os, json, sys
import torch.distributed as dist
dist.init_process_group("gloo")  # as Ray Train's TorchTrainer does before the user's function
for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
             "TORCHELASTIC_RUN_ID", "GROUP_RANK"):
    os.environ.pop(name, None)  # kscale must find the group itself
import numpy as np, keras, kscale
rank = dist.get_rank()
keras.utils.set_random_seed(rank)  # other weights on every rank: the chief's are broadcast
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
model = kscale.distribute(model)
x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
model.fit(x, x.sum(axis=1, keepdims=True), batch_size=4, epochs=1, shuffle=False, verbose=0)
json.dump({"backend": model.kscale_plan.backend, "workers": kscale.size(), "rank": kscale.rank(),
           "weights": [w.tolist() for w in model.get_weights()],
           # Keras' own DDP (its development branch): none (3.15), or off (False)
           "keras_ddp": type(getattr(model, "ddp_model", None)).__name__},
          open(sys.argv[1] + f".{rank}.json", "w"))
"""


def test_a_process_group_made_before_kscale_is_the_one_it_trains_in(launch, tmp_path):
    import json

    script = tmp_path / "group_first.py"
    script.write_text(GROUP_FIRST)
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    done = launch([*run, str(script), str(tmp_path / "out")], KERAS_BACKEND="torch")
    assert done.returncode == 0, crash_report(done.stdout)
    results = [json.loads((tmp_path / f"out.{rank}.json").read_text()) for rank in (0, 1)]
    assert results[0]["backend"] == "torch" and [r["workers"] for r in results] == [2, 2]
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["weights"] == results[1]["weights"]
    assert {r["keras_ddp"] for r in results} <= {"NoneType", "bool"}
