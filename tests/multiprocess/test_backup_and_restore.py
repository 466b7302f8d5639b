"""BackupAndRestore in every backend: a job killed after epoch 2 of 4, relaunched, resumes at epoch 3 everywhere.

The resumed weights must equal one uninterrupted process at the same global batch and rate (SGD with
momentum, so the optimizer's own state has to come back too), and be identical on every rank.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

WORKER = "tests/multiprocess/workers/resume.py"
TOLERANCE = 1e-5

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def uninterrupted(run_python, tmp_path_factory) -> dict:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    run_python([WORKER, "reference", str(workdir)], timeout=180)
    return _result(workdir, 0)


def _result(workdir, rank: int) -> dict:
    with open(os.path.join(workdir, f"result.{rank}.json")) as f:
        return json.load(f)


def _max_diff(a: list, b: list) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True))


def _assert_resumed(workdir, ranks: int, uninterrupted: dict) -> None:
    results = [_result(workdir, rank) for rank in range(ranks)]
    with open(os.path.join(workdir, "backed_up.0.json")) as f:
        backed_up = json.load(f)  # the chief's weights and optimizer state when its backup was written
    for rank, result in enumerate(results):
        # Every rank resumed from exactly what the killed chief backed up: its weights and step count.
        for part in ("weights", "optimizer"):
            assert _max_diff(result["restored"][part], backed_up[part]) == 0.0, f"rank {rank}: {part}"
        assert result["epochs"] == [2, 3], f"rank {rank} ran epochs {result['epochs']}"
        # 64 samples at global batch 8: 8 steps an epoch; 16 came back with the backup, 16 were run.
        assert result["iterations"] == uninterrupted["iterations"] == 32, f"rank {rank}"
        assert _max_diff(result["final"], results[0]["final"]) == 0.0, f"rank {rank} differs from rank 0"
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, f"rank {rank}"
    assert uninterrupted["epochs"] == [0, 1, 2, 3]
    assert not os.path.exists(os.path.join(workdir, "backup", "chief"))  # deleted when training ended


def _assert_killed(codes: list[int], output: str) -> None:
    assert 3 in codes or any(code != 0 for code in codes), codes
    assert "dying after epoch 2" in output


@pytest.mark.timeout(300)
def test_single_process(run_python, uninterrupted, tmp_path):
    killed = run_python([WORKER, "single", str(tmp_path), "--crash-after-epochs", "2"], check=False)
    _assert_killed([killed.returncode], killed.stdout)
    run_python([WORKER, "single", str(tmp_path)])
    _assert_resumed(tmp_path, 1, uninterrupted)


@pytest.mark.timeout(300)
def test_two_mirrored_replicas(run_python, uninterrupted, tmp_path):
    killed = run_python([WORKER, "mirrored", str(tmp_path), "--crash-after-epochs", "2"], check=False)
    _assert_killed([killed.returncode], killed.stdout)
    run_python([WORKER, "mirrored", str(tmp_path)])
    _assert_resumed(tmp_path, 1, uninterrupted)


@pytest.mark.timeout(300)
def test_two_horovod_workers(horovodrun, uninterrupted, tmp_path):
    killed = horovodrun(2, [WORKER, "horovod", str(tmp_path), "--crash-after-epochs", "2"], check=False)
    _assert_killed([killed.returncode], killed.stdout)
    horovodrun(2, [WORKER, "horovod", str(tmp_path)])
    _assert_resumed(tmp_path, 2, uninterrupted)


@pytest.mark.timeout(300)
def test_two_tf_config_workers(tf_config_workers, uninterrupted, tmp_path):
    killed = tf_config_workers(
        2, [WORKER, "multi_worker", str(tmp_path), "--crash-after-epochs", "2"], check=False
    )
    _assert_killed([k.returncode for k in killed], "".join(k.stdout for k in killed))
    tf_config_workers(2, [WORKER, "multi_worker", str(tmp_path)])
    _assert_resumed(tmp_path, 2, uninterrupted)
