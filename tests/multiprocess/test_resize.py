"""A job saved by N workers and resumed by M continues where it stopped, planned for M (issue 8.2).

tests/multiprocess/workers/resize.py, N=2 -> M=1 and N=1 -> M=2, under horovodrun and TF_CONFIG workers,
through BackupAndRestore (the job dies after epoch 2 of 4) and through ModelCheckpoint + load_model +
initial_epoch (every pair of those choices once). The resumed job runs epochs 2 and 3 at the single-replica rate x M (not x N x M), starting
from the saved step count and Adam moments.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

WORKER = "tests/multiprocess/workers/resize.py"
LR, SAMPLES, BATCH = 0.01, 64, 4

pytestmark = pytest.mark.multiprocess


def _launch(launchers, engine: str, workers: int, args: list[str], check: bool = True):
    if workers == 1:
        return launchers["python"]([WORKER, args[0], "single", *args[1:]], check=check)
    if engine == "horovod":
        return launchers["horovod"](workers, [WORKER, args[0], "horovod", *args[1:]], check=check)
    return launchers["tf"](workers, [WORKER, args[0], "multi_worker", *args[1:]], check=check)


@pytest.fixture
def launchers(run_python, horovodrun, tf_config_workers):
    return {"python": run_python, "horovod": horovodrun, "tf": tf_config_workers}


def _results(workdir, phase: int, ranks: int) -> list[dict]:
    out = []
    for rank in range(ranks):
        with open(os.path.join(workdir, f"phase{phase}.{rank}.json")) as f:
            out.append(json.load(f))
    return out


#: Four of the eight combinations of engine, direction and way of saving, chosen so that every pair of
#: choices is tried once (a fault that needs two of them together still shows), at half the launches.
COMBINATIONS = [
    ("horovod", 2, 1, "backup"),
    ("horovod", 1, 2, "checkpoint"),
    ("tf", 2, 1, "checkpoint"),
    ("tf", 1, 2, "backup"),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine, before, after, how", COMBINATIONS)
def test_resume_with_another_number_of_workers(launchers, tmp_path, engine, how, before, after):
    _launch(launchers, engine, before, [how, str(tmp_path), "1"], check=how != "backup")  # backup: dies
    saved = _results(tmp_path, 1, before)[0]
    assert saved["workers"] == before and saved["epochs"] == [0, 1]
    assert saved["rates"] == pytest.approx([LR * before] * 2)
    assert saved["written_rates"] == pytest.approx([LR] * 2)  # the file holds the rate as written
    _launch(launchers, engine, after, [how, str(tmp_path), "2"])
    resumed = _results(tmp_path, 2, after)
    for rank, result in enumerate(resumed):
        where = f"rank {rank}"
        assert result["workers"] == after, where
        assert result["epochs"] == [2, 3], where  # from the saved epoch, to the end asked for
        assert result["rates"] == pytest.approx([LR * after] * 2, rel=1e-6), where  # not LR x before x after
        assert result["written_rates"] == pytest.approx([LR] * 2, rel=1e-6), where
        assert result["start_iterations"] == 2 * SAMPLES // (BATCH * before), where  # the saved step count
        assert result["start_slots"] == pytest.approx(saved["end_slots"], rel=1e-5), where  # Adam's moments
        for left, right in zip(result["weights"], resumed[0]["weights"], strict=True):
            np.testing.assert_array_equal(np.asarray(left), np.asarray(right), err_msg=where)
