"""kscale.launch.workers: this node's worker processes; the first failure ends the job and says who and how."""

from __future__ import annotations

import io
import sys

import pytest

from kscale.launch import workers

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


def run(script: str, ranks: int = 2, capsys=None) -> tuple[int, str]:
    log = io.StringIO()
    code = workers.run(
        [sys.executable, "-c", script], {r: {"RANK": str(r), "PATH": ""} for r in range(ranks)}, log
    )
    return code, log.getvalue()


def test_all_workers_succeed_and_their_output_is_prefixed_by_rank(capfd):
    code, log = run("import os; print('hello from', os.environ['RANK'])")
    assert code == 0 and log == ""
    out = capfd.readouterr().out
    assert "[0]<stdout>:hello from 0" in out and "[1]<stdout>:hello from 1" in out


def test_the_first_failure_ends_the_others_and_is_the_jobs_status():
    script = "import os, sys, time\nif os.environ['RANK'] == '1': sys.exit(3)\ntime.sleep(30)"
    code, log = run(script)
    assert code == 3
    assert "rank 1 on " in log and "exited with status 3" in log and "stopped the other 1 worker" in log


def test_a_killed_worker_reports_its_signal():
    script = "import os, signal, time\nif os.environ['RANK'] == '0': os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(30)"
    code, log = run(script)
    assert code == 128 + 9 and "rank 0 on " in log and "was killed by SIGKILL" in log


def test_free_ports_are_distinct():
    ports = workers.free_ports(4)
    assert len(set(ports)) == 4 and all(p > 0 for p in ports)


def test_exit_statuses_read_as_launchers_mean_them():
    from kscale.launch.exits import describe_exit, describe_status

    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_status(137) == "was killed by SIGKILL (exit status 137)"  # horovodrun's 128 + 9
    assert describe_status(3) == "exited with status 3"
