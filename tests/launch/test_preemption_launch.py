"""`kscale run`'s side of preemption (kscale/launch): its status when the workers stopped for a notice, the
notice passed on to its workers, and `--max-restarts`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from kscale.errors import LaunchError
from kscale.launch import exits, launcher

# A worker that, told SIGTERM, finishes what it does (0.5 s) and records that it did before it stops with 143.
WORKER = textwrap.dedent(
    """
    import os, signal, sys, time
    told = []
    signal.signal(signal.SIGTERM, lambda *_: told.append(1))
    print("ready", flush=True)
    while not told:
        time.sleep(0.01)
    time.sleep(0.5)
    open(os.path.join(sys.argv[1], "finished." + os.environ["RANK"]), "w").close()
    sys.exit(143)
    """
)

LAUNCHER = textwrap.dedent(
    """
    import os, sys
    from kscale.launch import workers
    env = dict(os.environ)
    command = [sys.executable, "-c", sys.argv[1], sys.argv[2]]
    sys.exit(workers.run(command, {rank: {**env, "RANK": str(rank)} for rank in range(2)}))
    """
)


@pytest.mark.timeout(120)
def test_sigterm_to_the_launcher_reaches_every_worker_which_may_finish_first(tmp_path):
    job = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, WORKER, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        ready = 0
        for line in job.stdout:
            ready += line.endswith("ready\n")
            if ready == 2:
                break
        job.send_signal(signal.SIGTERM)
        output = job.stdout.read()
        code = job.wait(timeout=60)
    finally:
        job.kill()
    # Each worker ended its own way (not killed by the launcher), and the job says how they ended.
    assert sorted(os.listdir(tmp_path)) == ["finished.0", "finished.1"], output
    assert code == 143, output


# A launcher told SIGTERM right after it started its first worker, before the second: it must not end by
# SIGTERM's default (status -15, its workers left running without the notice; seen under a CPU-bound
# process beside the tests, when the notice came before the launcher's handler was set). Each worker waits
# for the notice at most 60 s, and says whether it had it.
PATIENT_WORKER = textwrap.dedent(
    """
    import os, signal, sys, time
    told = []
    signal.signal(signal.SIGTERM, lambda *_: told.append(1))
    deadline = time.monotonic() + 60
    while not told and time.monotonic() < deadline:
        time.sleep(0.01)
    open(os.path.join(sys.argv[1], ("told." if told else "untold.") + os.environ["RANK"]), "w").close()
    sys.exit(143 if told else 0)
    """
)
NOTICE_WHILE_STARTING = (
    textwrap.dedent(
        """
        import os, signal
        from kscale.launch import workers
        start = workers.start_process
        def start_then_notice(command, env):
            process = start(command, env)
            if env["RANK"] == "0":
                os.kill(os.getpid(), signal.SIGTERM)
            return process
        workers.start_process = start_then_notice
        """
    )
    + LAUNCHER
)


@pytest.mark.timeout(120)
def test_a_notice_while_the_workers_start_reaches_every_worker(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", NOTICE_WHILE_STARTING, PATIENT_WORKER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    output = done.stdout + done.stderr
    # The launcher's own status: 143 (a worker told before it set its handler ended by SIGTERM: 128 + 15).
    assert done.returncode == 143, (done.returncode, output)
    assert not [name for name in os.listdir(tmp_path) if name.startswith("untold")], os.listdir(tmp_path)


def test_the_job_says_preempted_where_a_worker_left_the_marker(tmp_path, capsys):
    marker = tmp_path / "preempted"
    assert exits.job_status(1, str(marker)) == 1  # a failure, no notice
    marker.touch()
    assert exits.job_status(1, str(marker)) == exits.PREEMPTED == 143  # torchrun's and horovodrun's 1
    assert "stopped for a preemption notice" in capsys.readouterr().err
    assert exits.job_status(0, str(marker)) == 0


def test_the_marker_is_named_to_the_workers_while_they_run():
    from kscale import environment

    with exits.preemption_marker() as marker:
        assert environment.detect().preempted_marker == marker
        assert os.path.isdir(os.path.dirname(marker)) and not os.path.exists(marker)
    assert environment.detect().preempted_marker is None
    assert not os.path.exists(os.path.dirname(marker))


def test_max_restarts_starts_a_failed_job_again_until_it_succeeds(monkeypatch, capsys):
    statuses = [1, 143, 0]
    preflights = []

    def once(options, command, engine, nodes, preflight, build):
        preflights.append(preflight)
        return statuses.pop(0)

    monkeypatch.setattr(launcher, "_launch_once", once)
    assert launcher.launch([], ["python", "train.py"], max_restarts=2) == 0
    assert preflights == [True, False, False]  # the checks once, before the first start
    err = capsys.readouterr().err
    assert "restart 1 of 2" in err and "restart 2 of 2" in err


def test_max_restarts_gives_up_after_the_last_and_never_restarts_a_job_told_to_stop(monkeypatch):
    monkeypatch.setattr(launcher, "_launch_once", lambda *args: 1)
    assert launcher.launch([], ["python", "train.py"], max_restarts=1) == 1

    def told_to_stop(*args):
        exits.signals_received.append(signal.SIGTERM)  # as the launchers' handlers record it
        return 143

    calls = []
    monkeypatch.setattr(launcher, "_launch_once", lambda *args: calls.append(1) or told_to_stop())
    assert launcher.launch([], ["python", "train.py"], max_restarts=3) == 143
    assert len(calls) == 1
    with pytest.raises(LaunchError, match="0 or more"):
        launcher.launch([], ["python", "train.py"], max_restarts=-1)
