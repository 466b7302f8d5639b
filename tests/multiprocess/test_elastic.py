"""Elastic Horovod through the one line (issue 8.1): a worker joins, then one leaves, training finishes.

tests/multiprocess/workers/elastic.py under an elastic horovodrun (--min-np 2 --max-np 3) whose host
discovery script prints a file the test rewrites: 2 slots, then 3 (a worker joins), then 2 (one leaves).
Every epoch asked for runs once in the final history, every worker ends with the same weights, and each
epoch ran at the rate and steps planned for the world it ran in.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

WORKER = "tests/multiprocess/workers/elastic.py"
EPOCHS, LR, SAMPLES, BATCH = 60, 0.01, 96, 4

pytestmark = pytest.mark.multiprocess


def _epochs(workdir) -> list[dict]:
    lines = []
    for path in glob.glob(os.path.join(workdir, "epochs.*.jsonl")):
        with open(path) as f:
            lines += [json.loads(line) for line in f if line.strip()]
    return lines


def _wait_for(condition, job: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if job.poll() is not None:
            raise AssertionError(f"the job ended (status {job.returncode}) before {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(300)
def test_a_worker_joins_then_one_leaves_and_training_finishes(start_job, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discover.chmod(0o755)
    workdir = tmp_path / "out"
    workdir.mkdir()
    command = [
        "run", "-np", "2", "--min-np", "2", "--max-np", "3",
        "--host-discovery-script", str(discover), "--",
        sys.executable, WORKER, str(workdir), str(EPOCHS),
    ]  # fmt: skip
    with open(tmp_path / "log", "w+") as log:
        job = start_job(command, log, EPOCH_SLEEP="0.3")
        try:
            _wait_for(lambda: any(e["epoch"] >= 2 for e in _epochs(workdir)), job, "epoch 2 with 2 workers")
            hosts.write_text("localhost:3\n")
            _wait_for(
                lambda: sum(e["size"] == 3 for e in _epochs(workdir)) >= 6, job, "epochs with 3 workers"
            )
            hosts.write_text("localhost:2\n")
            job.wait(timeout=120)
        finally:
            job.kill()
            log.seek(0)
            output = log.read()
    assert job.returncode == 0, output[-6000:]
    lines = _epochs(workdir)
    sizes = [e["size"] for e in sorted(lines, key=lambda e: e["epoch"])]
    assert 3 in sizes and sizes[-1] == 2, sizes  # grew to 3, ended with 2
    for line in lines:  # each epoch ran at the rate and steps planned for its world
        assert line["rate"] == pytest.approx(LR * line["size"], rel=1e-6), line
        assert line["steps"] == SAMPLES // (BATCH * line["size"]), line
    finals = []
    for rank in range(2):
        with open(workdir / f"final.{rank}.json") as f:
            finals.append(json.load(f))
    for final in finals:
        assert final["size"] == 2
        assert final["history_epochs"][-1] == EPOCHS - 1  # the epochs asked for, no more
        assert set(final["history_epochs"]) <= set(range(EPOCHS))
        for left, right in zip(final["weights"], finals[0]["weights"], strict=True):
            np.testing.assert_array_equal(np.asarray(left), np.asarray(right))
    committed = {e["epoch"] for e in lines}
    assert committed == set(range(EPOCHS))  # every epoch ran (a cut one again, after the reset)
    assert output.count("kscale plan") >= 3, output[-6000:]  # printed again for each new world
