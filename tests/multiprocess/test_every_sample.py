"""Every sample, by default: 2 replicas on 101 samples with sample weights train on every sample once per
epoch (issue 35, item 2), and equal one process on the same 101 samples at the global batch, to 1e-5.
The last step's 5 samples are cut 3 and 2 (or 2 and 3), each replica's gradient weighted by its share;
dropping a sample, or averaging the short slices alike, would show. Shuffled (fit's shuffle), every way
is compared with one process by the conformance suite (default_shuffle, unseeded_shuffle, ...)."""

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
def target(run_python, tmp_path_factory) -> list[np.ndarray]:
    """One process, plain Keras, without shuffling."""
    plain = tmp_path_factory.mktemp("plain")
    run_python([WORKER, "reference", str(plain), "ordered", "1"])
    return _weights(plain)


def _check(workdir, ranks: int, expected: list[np.ndarray]) -> None:
    for rank in range(ranks):
        for got, want in zip(_weights(workdir, rank), expected, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"rank {rank}")
        with open(os.path.join(workdir, f"result.{rank}.json")) as f:
            assert "the last step's 5 samples cut in 2 slices" in json.load(f)["notes"][0]


@pytest.mark.timeout(240)
def test_two_mirrored_replicas(run_python, target, tmp_path):
    run_python([WORKER, "mirrored", str(tmp_path), "ordered", "1"])
    _check(tmp_path, 1, target)


@pytest.mark.timeout(300)
def test_two_horovod_workers(horovodrun, target, tmp_path):
    horovodrun(2, [WORKER, "horovod", str(tmp_path), "ordered", "1"])
    _check(tmp_path, 2, target)


@pytest.mark.timeout(300)
def test_two_tf_config_workers(tf_config_workers, target, tmp_path):
    tf_config_workers(2, [WORKER, "multi_worker", str(tmp_path), "ordered", "1"])
    _check(tmp_path, 2, target)
