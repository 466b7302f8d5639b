"""Real multi-host runs: two hosts as network namespaces, one `kscale run` per host, no SSH."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from kscale.launch import engines

MASTER = "10.99.0.1:29400"
REPO = Path(__file__).resolve().parents[2]
#: The engine `kscale run` picks on this lane's stack: Horovod for tf.keras, TF_CONFIG workers for Keras 3
#: on TensorFlow (whose TF_CONFIG lists every node's address: -H, in node-rank order), torchrun's c10d
#: rendezvous for Keras 3 on torch.
ENGINE = engines.default_engine()

pytestmark = [pytest.mark.multiprocess, pytest.mark.netns]


def pernode_args(rank: int, *extra: str) -> list[str]:
    return [
        "run",
        "--nnodes",
        "2",
        "--node-rank",
        str(rank),
        "--master",
        MASTER,
        "--nproc-per-node",
        "1",
        *(["-H", "hosta,hostb"] if ENGINE == "tf" else []),
        *extra,
    ]


def selftest(*args: str) -> list[str]:
    return ["--", sys.executable, "-m", "kscale.selftest", *args]


def describe(results: Sequence) -> str:
    return "\n".join(
        f"--- {r.host}: exit {r.returncode} after {r.elapsed:.0f} s ---\n{r.output[-4000:]}" for r in results
    )


@pytest.mark.timeout(420)
def test_hostname_on_loopback_is_named_refused_and_fails_bounded(two_hosts):
    """Horovod's Gloo listens where the host name resolves: 127.0.0.1 there fails a multi-host job.
    TF_CONFIG workers (Keras 3 on TensorFlow) listen on every address: the same hosts train."""
    if ENGINE != "horovod":
        _loopback_names_do_not_stop_tf_workers(two_hosts)
        return
    two_hosts.write_hosts(loopback=True)
    try:
        # kscale doctor names the problem and the exact /etc/hosts line that fixes it, on both hosts.
        doctor = ["doctor", "--nnodes", "2", "--master", MASTER]
        results = two_hosts.kscale_on_both([doctor, doctor], timeout=150)
        for host, result in zip(two_hosts.hosts, results):
            assert result.returncode == 1, describe(results)
            assert f"'{host.hostname}' resolves to 127.0.0.1" in result.output, describe(results)
            assert f"{host.address} {host.hostname}" in result.output, describe(results)

        # kscale run refuses to start (preflight) with the same fix, instead of starting a doomed job.
        argvs = [pernode_args(rank, *selftest()) for rank in (0, 1)]
        results = two_hosts.kscale_on_both(argvs, timeout=150)
        for host, result in zip(two_hosts.hosts, results):
            assert result.returncode == 2, describe(results)
            assert "preflight found" in result.output and f"{host.address} {host.hostname}" in result.output

        # Forced past the preflight, the job fails (Gloo connects to 127.0.0.1) on both nodes: no hang.
        forced = [
            pernode_args(rank, "--no-preflight", "--gloo-timeout-seconds", "20", *selftest())
            for rank in (0, 1)
        ]
        results = two_hosts.kscale_on_both(forced, timeout=180)
        assert all(r.returncode not in (0, None) for r in results), describe(results)
        assert "127.0.0.1" in "".join(r.output for r in results), describe(results)
    finally:
        two_hosts.write_hosts(loopback=False)

    # After the fix (each name on its own 10.99.0.x address) doctor is satisfied; the training run on the
    # fixed hosts is test_kscale_test_passes_on_two_hosts.
    results = two_hosts.kscale_on_both([doctor, doctor], timeout=150)
    assert [r.returncode for r in results] == [0, 0], describe(results)


def _loopback_names_do_not_stop_tf_workers(two_hosts) -> None:
    two_hosts.write_hosts(loopback=True)
    try:
        doctor = ["doctor", "--nnodes", "2", "--master", MASTER]
        results = two_hosts.kscale_on_both([doctor, doctor], timeout=150)
        assert [r.returncode for r in results] == [0, 0], describe(results)
        for host, result in zip(two_hosts.hosts, results):
            assert f"'{host.hostname}' resolves to 127.0.0.1" in result.output, describe(results)
        results = two_hosts.kscale_on_both([pernode_args(rank, *selftest()) for rank in (0, 1)], timeout=240)
        assert_selftest_passed(results)
    finally:
        two_hosts.write_hosts(loopback=False)


def assert_selftest_passed(results: Sequence) -> None:
    """Both nodes ran their rank of the self-test, passed, and hold the same weights."""
    assert [r.returncode for r in results] == [0, 0], describe(results)
    digests, ranks = [], []
    for node, result in enumerate(results):
        lines = [line for line in result.output.splitlines() if "kscale selftest PASS" in line]
        assert len(lines) == 1, describe(results)
        if ENGINE == "torch":  # torchrun prefixes the local rank; c10d numbers the nodes as they join
            assert lines[0].startswith("[default0]:"), describe(results)
        else:
            assert lines[0].startswith(f"[{node}]<stdout>:") and f"rank={node} size=2" in lines[0]
        ranks.append(int(lines[0].split("rank=", 1)[1].split()[0]))
        digests.append(lines[0].rsplit("weights=", 1)[1])
    assert sorted(ranks) == [0, 1] and "size=2" in lines[0], describe(results)
    assert digests[0] == digests[1], describe(results)  # both hosts hold the same weights


@pytest.mark.timeout(300)
def test_kscale_test_passes_on_two_hosts(two_hosts):
    """`kscale test` per node is `kscale run`'s per-node launch of the self-test (one launch for both: the
    self-test's own run per node was the same job, 12-21 s of each lane's CI)."""
    argvs = [["test", *pernode_args(rank)[1:]] for rank in (0, 1)]
    results = two_hosts.kscale_on_both(argvs, timeout=240)
    assert_selftest_passed(results)
    for result in results:
        assert "kscale test: PASS" in result.output, describe(results)
    if ENGINE == "horovod":
        assert "Gloo on eth0" in results[1].output, describe(results)


@pytest.mark.timeout(360)
def test_two_hosts_train_like_one_process(two_hosts, tmp_path):
    """The stack's equivalence worker on one rank per host: every rank's weights are one process's at
    twice the batch and rate (the file system is shared, as on a cluster with a shared home)."""
    worker = [sys.executable, "tests/stack/workers/equivalence.py"]
    done = subprocess.run(
        [*worker, "reference", tmp_path / "reference"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reference = json.loads((tmp_path / "reference.0.json").read_text())
    argvs = [pernode_args(rank, "--", *worker, "distributed", tmp_path / "run") for rank in (0, 1)]
    results = two_hosts.kscale_on_both([[str(a) for a in argv] for argv in argvs], timeout=300)
    assert [r.returncode for r in results] == [0, 0], describe(results)
    finals = []
    for rank in (0, 1):
        result = json.loads((tmp_path / f"run.{rank}.json").read_text())
        assert result["replicas"] == 2 and result["iterations"] == reference["iterations"]
        finals.append(np.concatenate([np.ravel(w) for w in result["final"]]))
    expected = np.concatenate([np.ravel(w) for w in reference["final"]])
    assert np.array_equal(finals[0], finals[1])
    assert np.max(np.abs(finals[0] - expected)) < 1e-5


@pytest.mark.timeout(240)
def test_a_dead_worker_stops_every_node(two_hosts):
    argvs = [pernode_args(rank, *selftest("--fail-rank", "1", "--fail-code", "3")) for rank in (0, 1)]
    results = two_hosts.kscale_on_both(argvs, timeout=180)
    assert all(r.returncode not in (0, None) for r in results), describe(results)
    assert any("exiting with status 3 after joining the job" in r.output for r in results), describe(results)
    # Bounded: well under the 30 s heartbeat timeout after the workers are up, not a hang.
    assert max(r.elapsed for r in results) < 150, describe(results)
