"""data_policy='every_sample': 2 replicas on 101 samples train on every sample once per epoch (issue 8.4).

The weights after training equal one process on the same 101 samples with the global batch, to 1e-5:
without shuffling against plain Keras; with shuffling (several epochs) against kscale in one process,
whose permutation of each epoch every worker draws alike. The last step's padding must add nothing and
its real samples count as in one process; dropping a sample, or a worker's own order, would show.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

WORKER = "tests/multiprocess/workers/every_sample.py"

pytestmark = pytest.mark.multiprocess


def _weights(workdir, rank: int = 0) -> list[np.ndarray]:
    with open(os.path.join(workdir, f"result.{rank}.json")) as f:
        return [np.asarray(w) for w in json.load(f)["weights"]]


@pytest.fixture(scope="module")
def targets(run_python, tmp_path_factory):
    """One process: plain Keras without shuffling (1 epoch), kscale with its shuffling (3 epochs)."""
    plain, shuffled = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("shuffled")
    run_python([WORKER, "reference", str(plain), "ordered", "1"])
    run_python([WORKER, "single", str(shuffled), "shuffle", "3"])
    return {"ordered": _weights(plain), "shuffle": _weights(shuffled)}


def _check(workdir, ranks: int, expected: list[np.ndarray]) -> None:
    for rank in range(ranks):
        for got, want in zip(_weights(workdir, rank), expected, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"rank {rank}")


def test_shuffling_changes_the_result(targets):
    """The shuffled target is not the ordered one: the comparisons below would notice a lost shuffle."""
    assert max(np.abs(a - b).max() for a, b in zip(targets["ordered"], targets["shuffle"])) > 1e-3


@pytest.mark.timeout(240)
@pytest.mark.parametrize("order, epochs", [("ordered", "1"), ("shuffle", "3")])
def test_two_mirrored_replicas(run_python, targets, tmp_path, order, epochs):
    run_python([WORKER, "mirrored", str(tmp_path), order, epochs])
    _check(tmp_path, 1, targets[order])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("order, epochs", [("ordered", "1"), ("shuffle", "3")])
def test_two_horovod_workers(horovodrun, targets, tmp_path, order, epochs):
    horovodrun(2, [WORKER, "horovod", str(tmp_path), order, epochs])
    _check(tmp_path, 2, targets[order])
    with open(os.path.join(tmp_path, "result.0.json")) as f:
        assert "the last step has 5 of 16 samples" in json.load(f)["notes"][0]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("order, epochs", [("ordered", "1"), ("shuffle", "3")])
def test_two_tf_config_workers(tf_config_workers, targets, tmp_path, order, epochs):
    tf_config_workers(2, [WORKER, "multi_worker", str(tmp_path), order, epochs])
    _check(tmp_path, 2, targets[order])
