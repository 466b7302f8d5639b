"""`kscale run` and `kscale test` for real on this host: horovodrun-style and per-node launches."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kscale.launch.workers import free_ports

REPO = Path(__file__).resolve().parents[2]
KSCALE = [sys.executable, "-m", "kscale.cli"]
CONSOLE_SCRIPT = Path(sys.executable).parent / "kscale"

SMALL_SCRIPT = """\
import os, sys, time
rank = os.environ["HOROVOD_RANK"]
print("rank", rank, "of", os.environ["HOROVOD_SIZE"], "local", os.environ["HOROVOD_LOCAL_RANK"],
      "controller", os.environ["HOROVOD_CONTROLLER"], "iface", os.environ["HOROVOD_GLOO_IFACE"], flush=True)
if len(sys.argv) > 1 and rank == sys.argv[1]:
    time.sleep(1)  # let the other rank print before it is killed
    sys.exit(3)
if len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))  # the rank that does not fail waits (as in a collective) until killed
"""


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "OMPI_", "PMI_", "SLURM_"))}
    env.pop("TF_CONFIG", None)
    env.update(PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def kscale(argv: list[str], cwd: Path, timeout: float = 150) -> subprocess.CompletedProcess:
    command = [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.exists() else KSCALE
    return subprocess.run(
        [*command, *argv], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def small_script(tmp_path: Path) -> Path:
    (tmp_path / "small.py").write_text(SMALL_SCRIPT)
    return tmp_path


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_run_two_processes_through_horovodrun(small_script):
    done = kscale(["run", "-np", "2", "--", sys.executable, "small.py"], cwd=small_script)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "[0]<stdout>:rank 0 of 2 local 0 controller gloo" in out
    assert "[1]<stdout>:rank 1 of 2 local 1 controller gloo" in out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_run_refuses_a_missing_script_before_starting_anything(small_script):
    done = kscale(["run", "-np", "2", "--", sys.executable, "nothere.py"], cwd=small_script, timeout=90)
    assert done.returncode == 2
    assert "kscale run: error: training script 'nothere.py' not found" in done.stderr


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_per_node_launch_stops_the_job_when_a_worker_dies(small_script):
    [port] = free_ports(1)
    argv = ["run", "--nproc-per-node", "2", "--master", f"127.0.0.1:{port}", "--"]
    start = time.monotonic()
    done = kscale([*argv, sys.executable, "small.py", "1", "600"], cwd=small_script)
    elapsed = time.monotonic() - start
    out = done.stdout + done.stderr
    assert done.returncode == 3, out  # the first failure's status, not the killed rank's
    assert "[0]<stdout>:rank 0 of 2 local 0 controller gloo iface lo" in out
    assert f"rank 1 on {socket.gethostname()} (node 0) exited with status 3" in out
    assert elapsed < 90, f"took {elapsed:.0f} s; rank 0 sleeps 600 s unless it is killed"


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_kscale_test_passes_with_two_processes(tmp_path):
    done = kscale(["test", "-np", "2"], cwd=tmp_path, timeout=210)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "[0]<stdout>:kscale selftest PASS rank=0 size=2" in out
    assert "[1]<stdout>:kscale selftest PASS rank=1 size=2" in out
    assert "kscale test: PASS" in out
    digests = {line.rsplit("weights=", 1)[1] for line in out.splitlines() if "selftest PASS" in line}
    assert len(digests) == 1, out


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_node_zero_notices_a_node_that_vanishes(small_script):
    """Two per-node launches on this host; node 1's kscale run is killed -9: node 0 stops the job."""
    [port] = free_ports(1)
    logs = [(small_script / f"node{rank}.log").open("w") for rank in (0, 1)]
    command = [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.exists() else KSCALE
    node = [
        "run",
        "--no-preflight",
        "--nnodes",
        "2",
        "--master",
        f"127.0.0.1:{port}",
        "--heartbeat-timeout",
        "3",
    ]
    script = ["--", sys.executable, "small.py", "none", "600"]
    procs = [
        subprocess.Popen(
            [*command, *node, "--node-rank", str(rank), *script],
            cwd=small_script,
            env=clean_env(),
            stdout=logs[rank],
            stderr=subprocess.STDOUT,
        )
        for rank in (0, 1)
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(f"rank {r} of 2" in (small_script / f"node{r}.log").read_text() for r in (0, 1)):
            assert time.monotonic() < deadline, "the workers did not start"
            assert all(p.poll() is None for p in procs), "a node exited early"
            time.sleep(0.5)
        procs[1].kill()
        start = time.monotonic()
        assert procs[0].wait(timeout=60) == 1
        assert time.monotonic() - start < 30
        assert "node 1 sent no heartbeat for 3 s" in (small_script / "node0.log").read_text()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for log in logs:
            log.close()


def test_horovodrun_failures_name_the_rank_and_host(monkeypatch):
    import argparse

    from kscale.launch import launcher

    monkeypatch.setattr(launcher.socket, "gethostname", lambda: "thishost")
    args = argparse.Namespace(hosts="localhost:2,hostb:2", num_proc=4)
    assert launcher._who_failed(args, "1") == "rank 1 on thishost"
    assert launcher._who_failed(args, "3") == "rank 3 on hostb"
    assert launcher._who_failed(args, "hostb[1]") == "local rank 1 on hostb"  # the elastic driver's name
