"""Real multi-host runs: two hosts as network namespaces, one `kscale run` per host, no SSH."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pytest

MASTER = "10.99.0.1:29400"

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
    # fixed hosts is test_per_node_selftest_trains_on_two_hosts.
    results = two_hosts.kscale_on_both([doctor, doctor], timeout=150)
    assert [r.returncode for r in results] == [0, 0], describe(results)


@pytest.mark.timeout(300)
def test_per_node_selftest_trains_on_two_hosts(two_hosts):
    results = two_hosts.kscale_on_both([pernode_args(rank, *selftest()) for rank in (0, 1)], timeout=240)
    assert [r.returncode for r in results] == [0, 0], describe(results)
    digests = []
    for rank, result in enumerate(results):
        lines = [line for line in result.output.splitlines() if "kscale selftest PASS" in line]
        assert len(lines) == 1 and lines[0].startswith(f"[{rank}]<stdout>:"), describe(results)
        assert f"rank={rank} size=2" in lines[0]
        digests.append(lines[0].rsplit("weights=", 1)[1])
    assert digests[0] == digests[1], describe(results)  # both hosts hold the same weights
    assert "Gloo on eth0" in results[1].output


@pytest.mark.timeout(240)
def test_a_dead_worker_stops_every_node(two_hosts):
    argvs = [pernode_args(rank, *selftest("--fail-rank", "1", "--fail-code", "3")) for rank in (0, 1)]
    results = two_hosts.kscale_on_both(argvs, timeout=180)
    assert all(r.returncode not in (0, None) for r in results), describe(results)
    assert "exiting with status 3 after joining the job" in results[1].output
    # Bounded: well under the 30 s heartbeat timeout after the workers are up, not a hang.
    assert max(r.elapsed for r in results) < 150, describe(results)
