"""evaluate(), validation and predict() across workers equal one process on all the data (issue 8.5).

tests/multiprocess/workers/exact_metrics.py on 101 samples (not divisible by 2): AUC, precision and a
sample-weighted mean to 1e-6, every sample evaluated and predicted once, in one process under kscale and with
Horovod's predict split over the workers. The same metrics under every backend of every lane, against one
process at the global batch: the conformance program weighted_binary_metrics.
"""

from __future__ import annotations

import json
import os

import pytest

WORKER = "tests/multiprocess/workers/exact_metrics.py"
SAMPLES = 101

pytestmark = pytest.mark.multiprocess


def _check(workdir, ranks: int, predicted_once: bool) -> None:
    results = []
    for rank in range(ranks):
        with open(os.path.join(workdir, f"result.{rank}.json")) as f:
            results.append(json.load(f))
    for rank, result in enumerate(results):
        for what in ("evaluate", "validation"):
            got, expected = result[what], result[f"{what}_one_process"]
            assert set(got) == set(expected), (rank, what)
            for name in expected:
                assert got[name] == pytest.approx(expected[name], abs=1e-6), (rank, what, name)
        assert result["predict_shape"] == [SAMPLES, 1]
        assert result["predict_max_error"] < 1e-6, rank
    if predicted_once:  # each sample computed on one worker only
        assert sum(result["predicted_here"] for result in results) == SAMPLES


@pytest.mark.timeout(240)
def test_one_process(run_python, tmp_path):
    run_python([WORKER, "single", str(tmp_path)])
    _check(tmp_path, 1, predicted_once=True)


@pytest.mark.timeout(300)
def test_two_horovod_workers_split_predict(horovodrun, tmp_path):
    horovodrun(2, [WORKER, "horovod", str(tmp_path), json.dumps({"split_predict": True})])
    _check(tmp_path, 2, predicted_once=True)
